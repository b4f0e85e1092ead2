"""The instructor's page, asked of the service every 2 s, laid out to read at 1280 x 800 without scrolling for
what a teacher acts on: on the left the framed prompt by its question (n of N answered, left unanswered,
answered after seeing the run, not reached; the room's predictions as bars, the right ones marked by the
instructor's own run, else by each learner's kernel; what the kernels measured and how many differ); on the
right what the room learned on the concept inventory (each concept's before, after and g with its 95 % interval,
concepts nobody answered folded into one line) and the labs in progress (passed / tried / not started). Below:
every prompt of every lesson in order with its first vote and second vote (a button frames one; "follow the
room" frames the furthest prompt most learners reached); where each learner is (the furthest prompt reached,
the last lab check) with a button that removes their records; who is stuck where; the inventory's item
statistics (difficulty, discrimination, each distractor's count with its misconception, flags); the session report.

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
  #framed .question { display: block; font-size: 1.05em; font-weight: 600; margin: .2em 0 .3em; }
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
  .labs { display: flex; flex-wrap: wrap; gap: .1em 1em; } .labs details[open] { flex-basis: 100%; }
  .labs table { margin-bottom: .3em; } #concepts tr.low td { background: #fce8e6; }
  .top { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5em; } .top > section { min-width: 0; }
  #framed { margin-top: .3em; } h2.first { margin-top: .3em; } .top h2 { margin: .6em 0 .2em; }
  .interval { position: relative; display: inline-block; width: 5em; height: .8em; background: #f1f3f4;
              vertical-align: middle; margin-right: .4em; }
  .interval .range { position: absolute; top: .25em; height: .3em; background: #1a73e8; }
  .interval .at { position: absolute; top: 0; width: 2px; height: .8em; background: #174ea6; }
  .interval .zero { position: absolute; top: 0; width: 1px; height: .8em; background: #999; }
  #concepts td, .labs td { padding-top: 0; padding-bottom: 0; white-space: nowrap; }
  #concepts table, .labs table { font-size: .9em; } #inventory-notes { font-size: .85em; }
  .labs summary { font-size: .9em; } h2 .muted { font-weight: normal; font-size: .85em; }
  #items { font-size: .88em; } #items td { vertical-align: top; } #items tr.flagged td { background: #fef7e0; }
  #items .idea { color: #555; } .after { color: #b06000; }
</style>
</head>
<body>
<div><h1>The room</h1> · session of <span id="session">…</span> · <span id="learners">…</span> · refreshed <span id="refreshed">never</span> ·
  <a id="export" href="export.csv" download>export the session as CSV</a> ·
  <a id="report" href="report.html" target="_blank">session report</a> (<a href="report.csv" download>CSV</a>)</div>
<div class="top">
  <section><section id="framed"><p class="muted">No prediction yet: the framed prompt appears when a learner reaches one.</p></section></section>
  <section>
    <div id="concepts" hidden><h2 class="first">What the room learned <span class="muted">(the concept inventory:
      right before and after; g = (after - before) / (1 - before), below 0.3 flagged)</span></h2>
      <table><thead><tr><th>lesson</th><th>concept</th><th>before</th><th>after</th><th>g</th><th>95 % interval</th>
        <th>n</th></tr></thead><tbody></tbody></table>
      <div id="inventory-notes" class="muted"></div></div>
    <h2>Labs <span class="muted">(the ones in progress open)</span></h2>
    <div id="labs" class="labs"></div>
  </section>
</div>
<div class="columns">
  <section><h2>Prompts, lesson by lesson <span class="muted">(answered of N · right in the first vote → the second;
    "frame" shows one above)</span></h2>
    <div id="lessons"></div></section>
  <section><h2>Where each learner is</h2>
    <table id="positions"><thead><tr><th>learner</th><th>furthest prompt</th><th>last lab check</th><th></th></tr></thead>
      <tbody></tbody></table>
    <div id="removals" class="muted"></div>
    <div id="stuck" hidden><h2>Who is stuck where <span class="muted">(wrong on a post question; or no record of any
      kind for 10 minutes while the room went on)</span></h2>
      <table><thead><tr><th>learner</th><th>wrong after</th><th>minutes quiet</th></tr></thead><tbody></tbody></table>
    </div></section>
</div>
<section id="items-section" hidden><h2>The inventory's items, this session <span class="muted">(right: the share who
  chose the key; discrimination against the rest of the form; the distractors chosen, each with the misconception it
  stands for; flagged items first)</span></h2>
  <table id="items"><thead><tr><th>item</th><th>taken</th><th>concept</th><th>answers</th><th>right</th><th>discrimination</th>
    <th>distractors chosen</th><th>flag</th></tr></thead><tbody></tbody></table></section>
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
  else where.append("following the room (the furthest prompt most learners reached)");
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
  if (p.after_seeing) counts.append(el("span", "after", ` · ${p.after_seeing} answered after seeing the run (left out)`));
  box.append(counts);
  const most = Math.max(1, ...p.predictions.map(v => v[1]));
  for (const [v, n, right] of p.predictions) {
    const bar = el("div", "bar" + (right && right === n ? " right" : "")); bar.dataset.value = v;
    const fill = el("div", "fill"); fill.style.width = (14 * n / most) + "em";
    bar.append(value(v), fill, el("span", "count", String(n)));
    box.append(bar);
  }
  const m = el("div", "measured");
  if (p.measured.length) {
    m.append("measured: ");
    p.measured.forEach(([v, n], i) => { if (i) m.append(", "); m.append(value(v), ` (${kernels(n)})`); });
    if (p.reference !== null) {
      m.append(" · the instructor's run: ", value(p.reference), ` · ${p.right} right`);
      if (p.differ) m.append(` · ${kernels(p.differ)} measured otherwise`);
    } else m.append(` · ${p.right} right by their own kernel (run the prompt yourself to judge by your run)`);
  }
  box.append(m);
}
function pct(x) { return x === null ? "–" : Math.round(100 * x) + "%"; }
function interval(c) {  // g and its 95 % interval on -0.5 .. 1, with 0 marked
  const x = v => Math.max(0, Math.min(100, (v + 0.5) / 1.5 * 100)) + "%";
  const box = el("span", "interval"); box.title = `g ${c.g === null ? "undefined" : c.g.toFixed(2)}, ${Math.round(100 * room.inventory.level)} % interval ` +
    (c.lo === null ? "undefined" : `${c.lo.toFixed(2)} to ${c.hi.toFixed(2)}`);
  const zero = el("span", "zero"); zero.style.left = x(0); box.append(zero);
  if (c.lo !== null && c.hi !== null) { const r = el("span", "range"); r.style.left = x(c.lo);
    r.style.width = `calc(${x(c.hi)} - ${x(c.lo)})`; box.append(r); }
  if (c.g !== null) { const a = el("span", "at"); a.style.left = x(c.g); box.append(a); }
  const cell = el("td", "n"); cell.append(box, c.lo === null ? "–" : `${c.lo.toFixed(2)} to ${c.hi.toFixed(2)}`);
  return cell;
}
function renderInventory(inv) {
  const box = document.getElementById("concepts"), rows = box.querySelector("tbody");
  box.hidden = !inv; rows.replaceChildren();
  const items = document.getElementById("items-section"), itemRows = items.querySelector("tbody");
  items.hidden = !inv || !inv.items.length; itemRows.replaceChildren();
  if (!inv) return;
  const answered = inv.concepts.filter(c => c.n), empty = inv.concepts.filter(c => !c.n);
  box.querySelector("table").hidden = !answered.length;  // no header over no rows
  for (const c of answered) {
    const low = c.g !== null && c.g < 0.3;
    const tr = el("tr", low ? "low" : ""); tr.dataset.concept = c.concept;
    tr.append(el("td", "", c.lesson.slice(0, 2)), el("td", "", c.concept), el("td", "n", pct(c.pre)),
              el("td", "n", pct(c.post)), el("td", "n", c.g === null ? "–" : c.g.toFixed(2)), interval(c),
              el("td", "n", String(c.n)));
    rows.append(tr);
  }
  const notes = document.getElementById("inventory-notes"); notes.replaceChildren();
  if (empty.length) {
    const d = foldable("concepts:empty", false); d.id = "empty-concepts";
    d.append(el("summary", "", `${empty.length} concept${empty.length === 1 ? "" : "s"} with no learner on both forms yet`),
             el("div", "", empty.map(c => c.concept).join(", ")));
    notes.append(d);
  }
  const o = inv.orders, left = inv.left_out;
  notes.append(el("div", "", `forms: ${o.AB} A then B, ${o.BA} B then A` + (o.off_plan ? `, ${o.off_plan} off the plan` : "") +
    ` · left out: ${left.after_seeing} after seeing the key, ${left.changed} changed` +
    ` · from ${inv.meaningful} learners a concept's interval tells a gain of 0.5 from none` +
    ` · as of ${new Date(inv.as_of * 1000).toLocaleTimeString()}`));
  for (const i of inv.items) {
    const tr = el("tr", i.flags.length ? "flagged" : ""); tr.dataset.item = i.item;
    const d = el("td");  // the most chosen distractor with its misconception; the others by count (hover: theirs)
    i.distractors.forEach(([choice, n, idea], k) => {
      if (k) { const other = el("span", "", ` · ${choice} ${n}`); other.title = idea; d.append(other); }
      else d.append(el("b", "", choice), ` ${n}`, el("span", "idea", idea ? " · " + idea : ""));
    });
    tr.dataset.phase = i.phase;
    tr.append(el("td", "", i.item), el("td", "", i.phase === "pre" ? "before" : "after"), el("td", "", i.concept), el("td", "n", String(i.n)), el("td", "n", pct(i.difficulty)),
              el("td", "n", i.discrimination === null ? "–" : i.discrimination.toFixed(2)), d,
              el("td", "", i.flags.join(", ")));
    itemRows.append(tr);
  }
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
      const votes = el("span", "votes", p.answered ? ` ${p.right}✓` + (p.second ? ` → ${p.second.right}✓` : "") : "");
      votes.title = "right in the first vote" + (p.second ? " → in the second" : "");
      li.append(el("span", "i", `${p.index + 1}.`), b, el("span", "n", `${p.answered}/${room.learners.n}`), votes,
                el("code", "", p.name), q);
      ol.append(li);
    }
    d.append(ol); lessons.append(d);
  }
  const body = document.querySelector("#positions tbody"); body.replaceChildren();
  for (const w of room.positions) {
    const tr = el("tr"); tr.dataset.user = w.user;
    let at = "no prompt yet";  // the furthest prompt reached: an old cell run again moves no one back
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
    `${r.removed_by} removed ${r.user}'s ${r.reveals} predictions and ${r.checks} checks` +
    (r.inventory ? ` and ${r.inventory} inventory answers` : "") + ` at ${new Date(r.at * 1000).toLocaleTimeString()}`)
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
  renderInventory(room.inventory);
  const labs = document.getElementById("labs"); labs.replaceChildren();
  const checked = lab => lab.exercises.some(e => e.passed + e.tried > 0);
  for (const lab of room.labs) {  // open: checked in, or the framed lesson's lab; the others a line each
    const active = checked(lab) || (fl && lab.label === fl.id);
    const d = foldable("lab:" + lab.label, active); d.dataset.lab = lab.label; d.style.order = d.open ? 0 : 1;
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
