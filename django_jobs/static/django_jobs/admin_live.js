/* django_jobs admin: keep the page's numbers current.
 *
 * With the event stream (data-events), every job event re-reads this page and swaps in the
 * parts marked data-djj-live, at most about once a second. A job page's stream is that job's
 * (events/?job=ID: its events and its children's), so every event it sends is about the page. Without a stream, or when it cannot be opened, the page re-reads itself every
 * data-refresh seconds instead. A part holding the keyboard focus is left alone.
 *
 * The job list (data-djj-live="results") re-reads its own URL, so it shows what a reload
 * would: its filters, search, order and page. Its rows are swapped inside the table Django's
 * actions.js is bound to, and actions.js is handed the rows of the moment instead of those it
 * found at load, so "select all" and the counter count new rows too. While any row is
 * selected for an action the list holds still (the rows would move under the selection); it
 * catches up once the selection is cleared.
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

  var boxes = "tr input.action-select";
  var liveBoxes = {
    get length() { return document.querySelectorAll(boxes).length; },
    forEach: function (fn) { document.querySelectorAll(boxes).forEach(fn); }
  };
  liveBoxes[Symbol.iterator] = function () {
    return document.querySelectorAll(boxes)[Symbol.iterator]();
  };
  if (typeof window.Actions === "function") {
    // actions.js (loaded before this deferred script) calls Actions once the page is parsed.
    var djangoActions = window.Actions;
    window.Actions = function (checkboxes, options) { return djangoActions(liveBoxes, options); };
  }
  var liveText = null;
  var held = false;

  function selected() {
    return document.querySelector("input.action-select:checked") !== null;
  }

  function swapResults(el, update, fresh) {
    if (selected()) {
      held = true;
      setStatus("Paused while jobs are selected: clear the selection to see new and changed jobs.");
      return;
    }
    if (held) { held = false; if (liveText) { setStatus(liveText); } }
    // The search box's "N results" beside it (the box itself, maybe being typed in, stays).
    var count = document.querySelector("#changelist-search span.quiet");
    var freshCount = fresh.querySelector("#changelist-search span.quiet");
    if (count && freshCount) { count.innerHTML = freshCount.innerHTML; }
    var rows = el.querySelector("#result_list > tbody");
    var freshRows = update.querySelector("#result_list > tbody");
    if (rows && freshRows) {
      if (rows.innerHTML !== freshRows.innerHTML) { rows.innerHTML = freshRows.innerHTML; }
      var counter = el.querySelector("span.action-counter");
      var freshCounter = update.querySelector("span.action-counter");
      if (counter && freshCounter) {
        counter.setAttribute("data-actions-icnt", freshCounter.getAttribute("data-actions-icnt"));
        counter.textContent = freshCounter.textContent;
      }
      return;
    }
    // The list was empty, or is now: its table and actions are new, bound afresh.
    el.innerHTML = update.innerHTML;
    if (window.Actions && el.querySelector(boxes)) { window.Actions(liveBoxes); }
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-djj-live]").forEach(function (el) {
      var update = fresh.getElementById(el.id);
      if (!update) { return; }
      if (el.getAttribute("data-djj-live") === "results") {
        swapResults(el, update, fresh);
      } else if (!el.contains(document.activeElement)) {
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

  // A selection cleared: catch up with what changed meanwhile.
  document.addEventListener("change", function (event) {
    if (held && event.target.matches && event.target.matches("input.action-select, #action-toggle")
        && !selected()) {
      refresh();
    }
  });

  function poll() {
    if (polling === null) {
      liveText = "Refreshing every " + every / 1000 + " s.";
      setStatus(liveText);
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
    liveText = "Live.";
    setStatus(liveText);
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
