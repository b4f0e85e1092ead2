"""The instructor's page: the room's predictions per prompt as bars beside the measured answer,
and per lab exercise how many passed, tried, not started; it asks the service every 2 s.

One HTML file with its script, kept in a module so that it installs with the package. ``{{xsrf}}``
is replaced by the hub's XSRF token when served.
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>The room</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
  .muted { color: #666; } code { background: #f3f3f3; padding: 0 .3em; }
  .prompt { border: 1px solid #ddd; border-radius: 6px; padding: .6em .8em; margin: .6em 0; }
  .prompt.current { border-color: #1a73e8; box-shadow: 0 0 0 2px #d2e3fc; }
  .bar { display: flex; align-items: center; gap: .5em; margin: .15em 0; }
  .bar .label { width: 16em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-family: monospace; }
  .bar .fill { height: 1.1em; background: #9aa0a6; min-width: 2px; }
  .bar.right .fill { background: #188038; }
  table { border-collapse: collapse; } td, th { padding: .2em .7em; border-bottom: 1px solid #eee; text-align: left; }
</style>
</head>
<body>
<h1>The room</h1>
<div class="muted"><span id="learners">…</span> · refreshed <span id="refreshed">never</span> ·
  <a id="export" href="export.csv" download>export the session as CSV</a></div>
<h2>Predictions (the prompt the room is on first)</h2>
<div id="prompts"><p class="muted">No prediction yet.</p></div>
<h2>Lab exercises</h2>
<table id="exercises"><thead><tr><th>lab</th><th>exercise</th><th>passed</th><th>tried, not passed</th>
  <th>not started</th></tr></thead><tbody></tbody></table>
<script>
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; }
function render(room) {
  document.getElementById("learners").textContent = room.learners + " learner(s)";
  document.getElementById("refreshed").textContent = new Date().toLocaleTimeString();
  const box = document.getElementById("prompts");
  if (room.prompts.length) box.replaceChildren();
  room.prompts.forEach((p, i) => {
    const div = el("div", "prompt" + (i === 0 ? " current" : ""));
    div.dataset.prompt = p.prompt;
    div.append(el("div", "muted", p.lesson), el("code", "", p.prompt));
    div.append(el("div", "", `${p.answered} predicted, ${p.agreed} as measured; measured: ${p.measured}`));
    const most = Math.max(...Object.values(p.predictions));
    for (const [value, n] of Object.entries(p.predictions).sort((a, b) => b[1] - a[1])) {
      const bar = el("div", "bar" + (value === p.measured ? " right" : ""));
      const fill = el("div", "fill"); fill.style.width = (12 * n / most) + "em";
      bar.append(el("span", "label", value), fill, el("span", "count", String(n)));
      div.append(bar);
    }
    box.append(div);
  });
  const body = document.querySelector("#exercises tbody"); body.replaceChildren();
  for (const e of room.exercises) {
    const tr = el("tr"); tr.dataset.exercise = e.exercise;
    for (const v of [e.lab, e.exercise, e.passed, e.tried, e.not_started]) tr.append(el("td", "", String(v)));
    body.append(tr);
  }
}
async function refresh() {
  try {
    const r = await fetch("api/room", {headers: {"X-XSRFToken": "{{xsrf}}"}});
    if (r.ok) { sessionStorage.removeItem("roomReloaded"); render(await r.json()); }
    else if (r.status === 403 && !sessionStorage.getItem("roomReloaded")) {  // log in again through the hub, once
      sessionStorage.setItem("roomReloaded", "1"); location.reload(); return;
    }
  } catch (e) {}
  setTimeout(refresh, 2000);
}
refresh();
</script>
</body>
</html>
"""
