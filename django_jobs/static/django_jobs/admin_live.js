/* django_jobs admin: keep the page's numbers current.
 *
 * With the event stream (data-events), every job event re-reads this page and swaps in the
 * parts marked data-djj-live, at most about once a second. A job page's stream is that job's
 * (events/?job=ID: its events and its children's), so every event it sends is about the page. Without a stream, or when it cannot be opened, the page re-reads itself every
 * data-refresh seconds instead. A part holding the keyboard focus is left alone.
 */
(function () {
  "use strict";
  var script = document.currentScript;
  var eventsUrl = script.getAttribute("data-events");
  var types = JSON.parse(script.getAttribute("data-types") || "[]");
  var every = 1000 * (parseFloat(script.getAttribute("data-refresh")) || 5);
  var busy = false;
  var again = false;
  var polling = null;
  var refreshes = 0;

  function setStatus(text) {
    var el = document.getElementById("djj-live-status");
    if (el) { el.textContent = text; }
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-djj-live]").forEach(function (el) {
      var update = fresh.getElementById(el.id);
      if (update && !el.contains(document.activeElement)) {
        el.innerHTML = update.innerHTML;
      }
    });
    if (fresh.title) { document.title = fresh.title; }  // the tab names the state too
    refreshes += 1;
    document.documentElement.setAttribute("data-djj-refreshes", String(refreshes));
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    window.setTimeout(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(swap)
        .catch(function () { /* the next event or poll tries again */ })
        .then(function () {
          busy = false;
          if (again) { again = false; refresh(); }
        });
    }, 500);
  }

  function poll() {
    if (polling === null) {
      setStatus("Refreshing every " + every / 1000 + " s.");
      polling = window.setInterval(refresh, every);
    }
  }

  function onEvent() {
    refresh();
  }

  if (!eventsUrl || !window.EventSource) { poll(); return; }
  var source = new EventSource(eventsUrl, { withCredentials: true });
  var opened = false;
  source.onopen = function () {
    opened = true;
    // Events sent before the stream opened (while this page loaded) were not heard: catch up.
    refresh();
    if (polling !== null) { window.clearInterval(polling); polling = null; }
    setStatus("Live.");
    document.documentElement.setAttribute("data-djj-live", "open");
  };
  source.onerror = function () {
    // The browser reconnects by itself; poll meanwhile, or for good if it gave up.
    if (!opened || source.readyState === EventSource.CLOSED) { poll(); }
  };
  types.forEach(function (type) { source.addEventListener(type, onEvent); });
  // Events were pruned while away: what the page shows may be stale.
  source.addEventListener("stream-reset", refresh);
})();
