"""The instructor's page, asked of the service every 2 s: the framed prompt by its question, with n of N
answered, left unanswered and not reached, the room's predictions as bars and what most kernels measured;
every prompt of every lesson in order (a button frames one; "follow the room" frames the prompt most
learners reached last); where each learner is, with a button that removes their records; every lab's
exercises in order with passed / tried / not started; each concept's gain, the framed prompt's most common
wrong predictions with the idea each reveals, who is stuck where, a second vote on the framed prompt (its
two rounds side by side), and the session report.

One HTML file with its script, kept in a module so that it installs with the package. ``{{xsrf}}``
is replaced by the hub's XSRF token when served. Every value is set as text, never as HTML.
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>The room</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 1em 1.5em; color: #222; }
  h1 { font-size: 1.25em; margin: 0; display: inline; } h2 { font-size: 1.05em; margin: 1em 0 .3em; }
  h3 { font-size: 1em; margin: .8em 0 .2em; }
  .muted { color: #666; } code { background: #f3f3f3; padding: 0 .3em; font-size: .9em; }
  button { font: inherit; font-size: .85em; padding: .05em .5em; cursor: pointer; }
  #framed { border: 2px solid #1a73e8; border-radius: 8px; padding: .6em 1em; margin: .6em 0; }
  #framed .question { display: block; font-size: 1.15em; font-weight: 600; margin: .2em 0 .3em; }
  #framed .counts { font-size: 1.05em; margin-bottom: .3em; } #framed .counts b { font-size: 1.15em; }
  .bar { display: grid; grid-template-columns: minmax(4em, max-content) 14em 3em; gap: .6em; align-items: start;
         margin: .15em 0; }
  .bar .label { font-family: monospace; max-width: 40em; overflow-wrap: anywhere; }
  .bar .fill { height: 1.1em; background: #9aa0a6; min-width: 2px; margin-top: .1em; }
  .bar.right .fill { background: #188038; } .bar.right .label { font-weight: bold; }
  details.value summary { cursor: pointer; }
  .columns { display: grid; grid-template-columns: 3fr 2fr; gap: 1.5em; } .columns > section { min-width: 0; }
  ol.prompts { margin: .2em 0; padding-left: .5em; list-style: none; }
  ol.prompts li { display: flex; gap: .4em; align-items: baseline; white-space: nowrap; margin: .1em 0; }
  ol.prompts li.framed { background: #e8f0fe; } ol.prompts .i { min-width: 1.6em; text-align: right; }
  ol.prompts .q { flex: 1; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
  details.lesson > summary, details.lab > summary { cursor: pointer; font-weight: 600; }
  table { border-collapse: collapse; } td, th { padding: .15em .6em; border-bottom: 1px solid #eee; text-align: left; }
  td.n { text-align: right; font-variant-numeric: tabular-nums; }
  #positions { font-size: .92em; width: 100%; table-layout: fixed; }
  #positions th:nth-child(1) { width: 6.5em; } #positions th:nth-child(2) { width: 10.5em; }
  #positions th:nth-child(4) { width: 5em; }
  #positions td { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .rounds { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; } .rounds h3 { margin-top: .2em; }
  #framed .wrong { margin-top: .4em; } #framed .wrong li .idea { color: #555; }
  .labs table { min-width: 40em; margin-bottom: .4em; } #concepts tr.low td { background: #fce8e6; }
</style>
</head>
<body>
<div><h1>The room</h1> · session of <span id="session">…</span> · <span id="learners">…</span> · refreshed <span id="refreshed">never</span> ·
  <a id="export" href="export.csv" download>export the session as CSV</a> ·
  <a id="report" href="report.html" target="_blank">session report</a> (<a href="report.csv" download>CSV</a>)</div>
<section id="framed"><p class="muted">No prediction yet: the framed prompt appears when a learner reaches one.</p></section>
<div class="columns">
  <section><h2>Prompts, lesson by lesson <span class="muted">(answered of N; "frame" shows one above)</span></h2>
    <div id="lessons"></div></section>
  <section><h2>Where each learner is</h2>
    <table id="positions"><thead><tr><th>learner</th><th>last prompt reached</th><th>last lab check</th><th></th></tr></thead>
      <tbody></tbody></table>
    <div id="removals" class="muted"></div>
    <div id="stuck" hidden><h2>Who is stuck where <span class="muted">(wrong on a post question; or no record for
      10 minutes while the room went on)</span></h2>
      <table><thead><tr><th>learner</th><th>wrong after</th><th>minutes quiet</th></tr></thead><tbody></tbody></table>
    </div></section>
</div>
<section id="concepts" hidden><h2>Concepts <span class="muted">(right before: the prompts; right after: the post
  questions; over the learners who answered both; g = (after - before) / (1 - before), below 0.3 flagged)</span></h2>
  <table><thead><tr><th>lesson</th><th>concept</th><th>right before</th><th>right after</th><th>g</th><th>n</th>
    <th></th></tr></thead><tbody></tbody></table></section>
<h2>Labs <span class="muted">(every exercise, in the lab's order)</span></h2>
<div id="labs" class="labs"></div>
<script>
const XSRF = "{{xsrf}}";
let room = null;
const opened = {};  // what the instructor opened or closed by hand, kept over refreshes: "lesson:ID" / "lab:LABEL"
function foldable(key, byDefault) {
  const d = el("details", key.split(":")[0]);
  d.open = key in opened ? opened[key] : byDefault;
  d.addEventListener("click", e => { if (e.target.tagName === "SUMMARY") opened[key] = !d.open; });
  return d;
}
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; }
function value(text) {  // a value in full: long ones fold, and open on a click
  if (text.length <= 40) return el("span", "label", text);
  const d = foldable("value:" + text, false); d.className = "label value";
  d.append(el("summary", "", text.slice(0, 40) + "…"), el("div", "", text));
  return d;
}
function rich(cls, text) {  // `code` in a question as code, everything as text
  const span = el("span", cls);
  text.split("`").forEach((part, i) => span.append(i % 2 ? el("code", "", part) : part));
  return span;
}
function kernels(n) { return n + (n === 1 ? " kernel" : " kernels"); }
function pinned() { try { return JSON.parse(localStorage.getItem("roomPin")); } catch (e) { return null; } }
function pin(lesson, line) {
  if (lesson) localStorage.setItem("roomPin", JSON.stringify({lesson, line})); else localStorage.removeItem("roomPin");
  render(room);
}
function framedPrompt() {
  const p = pinned();
  if (p) for (const l of room.lessons) for (const q of l.prompts) if (l.id === p.lesson && q.line === p.line)
    return [l, q, true];
  if (!room.follow) return [null, null, false];
  const l = room.lessons.find(l => l.id === room.follow.lesson);
  return [l, l.prompts[room.follow.index], false];
}
function renderFramed(lesson, p, isPinned) {
  const box = document.getElementById("framed");
  box.replaceChildren(); box.className = "prompt"; box.dataset.prompt = p.line; box.dataset.lesson = lesson.id;
  const where = el("div", "muted", `${lesson.title} · prompt ${p.index + 1} of ${lesson.prompts.length} · `);
  if (isPinned) { where.append("pinned here "); const b = el("button", "follow", "follow the room");
    b.onclick = () => pin(null); where.append(b); }
  else where.append("following the room (the prompt most learners reached last)");
  box.append(where, rich("question", p.question));
  const source = el("div", "muted", "the learner fills in ");
  source.append(el("code", "", p.name), " · revealed by ", el("code", "", p.line));
  box.append(source);
  if (p.second) {
    const both = el("div", "rounds");
    for (const [title, votes] of [["first vote", p], ["second vote", p.second]]) {
      const col = el("div", "round"); col.dataset.round = title; col.append(el("h3", "", title)); renderVotes(col, votes);
      both.append(col);
    }
    box.append(both);
  } else {
    renderVotes(box, p);
    const b = el("button", "second-vote", "open a second vote"); b.title = "from now on, this prompt's reveals count as a second round";
    b.onclick = async () => {
      const r = await fetch("api/round", {method: "POST", headers: {"X-XSRFToken": XSRF, "Content-Type": "application/json"},
                                          body: JSON.stringify({lesson: lesson.id, prompt: p.line})});
      if (r.ok) refresh(false); else alert("not opened: " + r.status);
    };
    box.append(b);
  }
  if (p.wrong.length) {
    const w = el("div", "wrong", "most common wrong predictions: "), ul = el("ul");
    for (const [v, n, idea] of p.wrong) {
      const li = el("li"); li.dataset.value = v;
      li.append(value(v), ` (${n})`, el("span", "idea", idea ? " · " + idea : ""));
      ul.append(li);
    }
    w.append(ul); box.append(w);
  }
}
function renderVotes(box, p) {  // one round's counts, its bars, and what the kernels measured
  const N = room.learners.n, counts = el("div", "counts");
  counts.append(el("b", "", `${p.answered} of ${N} answered`),
                ` · ${p.unanswered} left unanswered · ${p.not_reached} not reached`);
  box.append(counts);
  const most = Math.max(1, ...p.predictions.map(v => v[1]));
  for (const [v, n] of p.predictions) {
    const bar = el("div", "bar" + (v === p.majority ? " right" : "")); bar.dataset.value = v;
    const fill = el("div", "fill"); fill.style.width = (14 * n / most) + "em";
    bar.append(value(v), fill, el("span", "count", String(n)));
    box.append(bar);
  }
  const m = el("div", "measured");
  if (p.measured.length) {
    m.append("measured: ");
    p.measured.forEach(([v, n], i) => { if (i) m.append(", "); m.append(value(v), ` (${kernels(n)})`); });
    m.append(p.majority === null ? " · no value most kernels agree on" :
             ` · ${p.agreed} predicted what most kernels measured`);
  }
  box.append(m);
}
function render(data) {
  room = data;
  document.getElementById("session").textContent = room.session;
  document.getElementById("learners").textContent = `N = ${room.learners.n} learners: ${room.learners.basis}`;
  document.getElementById("refreshed").textContent = new Date().toLocaleTimeString();
  const [fl, fp, isPinned] = framedPrompt();
  if (fp) renderFramed(fl, fp, isPinned);
  const lessons = document.getElementById("lessons");
  lessons.replaceChildren();
  for (const l of room.lessons) {
    if (!l.prompts.length) continue;
    const d = foldable("lesson:" + l.id, l.reached || (fl && fl.id === l.id)); d.dataset.lesson = l.id;
    d.append(el("summary", "", `${l.title} (${l.prompts.length} prompt${l.prompts.length === 1 ? "" : "s"})`));
    const ol = el("ol", "prompts");
    for (const p of l.prompts) {
      const li = el("li", fp === p ? "framed" : ""); li.dataset.prompt = p.line;
      const b = el("button", "pin", "frame"); b.onclick = () => pin(l.id, p.line);
      const q = rich("q", p.question); q.title = p.question;
      li.append(el("span", "i", `${p.index + 1}.`), b, el("span", "n", `${p.answered}/${room.learners.n}`),
                el("code", "", p.name), q);
      ol.append(li);
    }
    d.append(ol); lessons.append(d);
  }
  const body = document.querySelector("#positions tbody"); body.replaceChildren();
  for (const w of room.positions) {
    const tr = el("tr"); tr.dataset.user = w.user;
    let at = "no prompt yet";
    if (w.reveal) { const l = room.lessons.find(l => l.id === w.reveal.lesson);
      at = `${l.id.slice(0, 2)} · prompt ${w.reveal.index + 1} of ${l.prompts.length}`; }
    const b = el("button", "remove", "remove");
    b.title = `remove every record of ${w.user}`;
    b.onclick = async () => {
      if (!confirm(`Remove every record of ${w.user}? The page and the CSV will no longer show them.`)) return;
      const r = await fetch("api/remove/" + encodeURIComponent(w.user), {method: "POST", headers: {"X-XSRFToken": XSRF}});
      if (r.ok) refresh(false); else alert("not removed: " + r.status);
    };
    const cell = el("td"); cell.append(b);
    const check = el("td", "check", w.check ? `${w.check.lab.split(" · ")[0]} · ${w.check.exercise}` : "none");
    if (w.check) check.title = `${w.check.lab}: ${w.check.exercise}`;
    tr.append(el("td", "", w.user), el("td", "at", at), check, cell);
    body.append(tr);
  }
  document.getElementById("removals").textContent = room.removals.map(r =>
    `${r.removed_by} removed ${r.user}'s ${r.reveals} predictions and ${r.checks} checks at ${new Date(r.at * 1000).toLocaleTimeString()}`)
    .concat(room.not_in_course ? [`${room.not_in_course} records name prompts or exercises no longer in the course (in the CSV)`] : [])
    .join("; ");
  const stuck = document.getElementById("stuck"), stuckRows = stuck.querySelector("tbody");
  stuck.hidden = !room.stuck.length; stuckRows.replaceChildren();
  for (const x of room.stuck) {
    const tr = el("tr"); tr.dataset.user = x.user;
    tr.append(el("td", "", x.user), el("td", "", x.wrong_after.join(", ") || "–"),
              el("td", "n", x.idle_min === null ? "" : String(x.idle_min)));
    stuckRows.append(tr);
  }
  const concepts = document.getElementById("concepts"), rows = concepts.querySelector("tbody");
  concepts.hidden = !room.concepts.length; rows.replaceChildren();
  const pct = x => x === null ? "–" : Math.round(100 * x) + "%";
  for (const c of room.concepts) {
    const tr = el("tr", c.g !== null && c.g < 0.3 ? "low" : ""); tr.dataset.concept = c.concept;
    tr.append(el("td", "", c.lesson.slice(0, 2)), el("td", "", c.concept), el("td", "n", pct(c.pre)),
              el("td", "n", pct(c.post)), el("td", "n", c.g === null ? "–" : c.g.toFixed(2)), el("td", "n", String(c.n)),
              el("td", "muted", (c.g !== null && c.g < 0.3 ? "below 0.3 · " : "") +
                 (c.only_pre + c.only_post ? `${c.only_pre} answered before only, ${c.only_post} after only` : "")));
    rows.append(tr);
  }
  const labs = document.getElementById("labs"); labs.replaceChildren();
  const checked = lab => lab.exercises.some(e => e.passed + e.tried > 0);
  const anyChecked = room.labs.some(checked);
  for (const lab of room.labs) {  // open: checked in, or the framed lesson's lab; all of them before any check
    const active = checked(lab) || (fl && lab.label === fl.id) || !anyChecked;
    const d = foldable("lab:" + lab.label, active); d.dataset.lab = lab.label;
    d.append(el("summary", "", `${lab.title} (${lab.exercises.length} exercises)`));
    const t = el("table"), head = el("tr");
    for (const h of ["exercise", "passed", "tried, not passed", "not started"]) head.append(el("th", "", h));
    t.append(head);
    for (const e of lab.exercises) {
      const tr = el("tr"); tr.dataset.exercise = e.name;
      tr.append(el("td", "", e.name), el("td", "n", String(e.passed)), el("td", "n", String(e.tried)),
                el("td", "n", String(e.not_started)));
      t.append(tr);
    }
    d.append(t); labs.append(d);
  }
}
async function refresh(again = true) {
  try {
    const r = await fetch("api/room", {headers: {"X-XSRFToken": XSRF}});
    if (r.ok) { sessionStorage.removeItem("roomReloaded"); render(await r.json()); }
    else if (r.status === 403 && !sessionStorage.getItem("roomReloaded")) {  // log in again through the hub, once
      sessionStorage.setItem("roomReloaded", "1"); location.reload(); return;
    }
  } catch (e) {}
  if (again) setTimeout(refresh, 2000);
}
refresh();
</script>
</body>
</html>
"""
