"""The demo's own job kinds (``jobs.py``): the only kinds the demo's registry holds.

``testproject.demo_settings`` (the demo, ``scripts/demo``) installs this app without the
``testproject`` app, whose ``jobs.py`` holds the test suite's kinds; the test settings
(``testproject.settings``) install both.
"""
