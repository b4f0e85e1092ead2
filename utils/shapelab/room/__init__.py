"""The room: a live lab session on JupyterHub.

``client`` runs in a learner's kernel and sends each prediction and lab check to the room service
(and does nothing outside a room); ``store`` keeps them (SQLite, or PostgreSQL for a hub on several
machines); ``service`` is the JupyterHub-managed service that receives them and serves the
instructor's page; ``manifest`` lists the lessons' prompts and the labs' exercises that the service
accepts (built from the notebooks by ``python -m shapelab.room.manifest``); ``learning`` is the one
rule for what a room learned (the prompts' first and second votes, right by the instructor's own run; the
concept inventory's g per concept with its interval and its item statistics; wrong predictions; who is
stuck), which the page and ``report`` (the session report, HTML and CSV, across sessions) share; ``noise``
simulates how much g moves by chance in a room of 20-40; ``hub`` writes the hub's configuration,
``accounts`` makes each learner an OS user with a home of their own, and ``logins`` gives each roster
name a login code. ``python -m shapelab.tools.room``
starts a room on one machine.

Only ``client`` is imported by the lessons; it uses the standard library alone.
"""
