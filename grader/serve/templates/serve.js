// The course server's pages, made on the server (a reader without this script sees the same
// content): this script only keeps them live. Each grade's phases as they come (server-sent
// events); when a grade ends, or an upload is taken, the page's parts are fetched again as the
// server renders them; the instructor's table updated as grades finish; every <time> shown in the
// reader's own time zone, in one form.
"use strict";

function two(n) { return (n < 10 ? "0" : "") + n; }

// One form for every date on the pages: 2026-12-07 14:09, in the reader's local time.
function localTimes(root) {
  Array.prototype.forEach.call((root || document).querySelectorAll("time[datetime]"), function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (isNaN(d.getTime())) return;
    t.textContent = d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
      two(d.getHours()) + ":" + two(d.getMinutes());
    t.title = "your local time";
  });
}

// The page again, as the server renders it now: its latest grade, best and attempts replace ours
// (the newest fetch wins: one that started earlier and ends later is dropped).
var fetched = 0;
function refresh() {
  var mine = ++fetched;
  return fetch(location.pathname, { credentials: "same-origin" })
    .then(function (r) { return r.text(); })
    .then(function (html) {
      if (mine !== fetched) return;
      var fresh = new DOMParser().parseFromString(html, "text/html");
      ["latest", "best", "best-fraction"].forEach(function (id) {
        var now = document.getElementById(id), got = fresh.getElementById(id);
        if (now && got) now.innerHTML = got.innerHTML;
      });
      var table = document.getElementById("attempts"), got = fresh.getElementById("attempts");
      if (table && got) table.tBodies[0].innerHTML = got.tBodies[0].innerHTML;
      Object.keys(phaseOf).forEach(showPhase);   // a page rendered before the latest event: that event stands
      localTimes(document);
      watchAll();
    })
    .catch(function () {});
}

var watching = {}, phaseOf = {};
// A grade's phases in their order: an event stream replays an upload's events from its first, so a
// row the server rendered as grading meets that upload's "queued" again; only the server's own
// "again" (a restarted worker, a retried grade) puts a row back in line.
var RANK = { queued: 0, grading: 1, cluster: 1, building: 2, checking: 3, timing: 4, counters: 5 };
function older(d, shown) { return !d.again && (RANK[d.phase] || 0) < (RANK[shown] || 0); }

// The latest phase an upload's events said, on its row (still in line or grading there: a row the
// server already shows graded keeps what the server says).
function showPhase(id) {
  var d = phaseOf[id], now = document.querySelector('tr[data-id="' + id + '"]');
  if (!now || !d) return;
  var s = now.getAttribute("data-state");
  if (s !== "queued" && s !== "grading" && !now.hasAttribute("data-live")) return;
  if (older(d, s)) return;
  now.querySelector(".outcome").textContent = d.phase + (d.place ? " (" + d.place + " in line)" : "");
  now.setAttribute("data-state", d.phase);
  now.setAttribute("data-live", "");              // set from the events, not by the server's page
}

function watch(row) {
  var id = row.getAttribute("data-id");
  if (watching[id]) return;
  watching[id] = true;
  var live = document.getElementById("live"), name = row.cells[1].textContent;
  var es = new EventSource("/api/submissions/" + encodeURIComponent(id) + "/events");
  es.addEventListener("phase", function (e) {
    var d = JSON.parse(e.data), text = d.phase + (d.place ? " (" + d.place + " in line)" : "");
    var now = document.querySelector('tr[data-id="' + id + '"]');
    if (now && older(d, now.getAttribute("data-state"))) return;     // a replayed event the row is past
    phaseOf[id] = d;
    showPhase(id);
    if (live) live.textContent = name + ": " + text;
  });
  es.addEventListener("done", function () {
    es.close();
    delete watching[id];
    delete phaseOf[id];
    refresh().then(function () {
      var now = document.querySelector('tr[data-id="' + id + '"] .outcome');
      if (live && now) live.textContent = name + ": " + now.textContent;
    });
  });
}

function watchAll() {
  var table = document.getElementById("attempts");
  if (!table) return;
  Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
    var s = row.getAttribute("data-state");
    if (s === "queued" || s === "grading") watch(row);
  });
}

function studentPage() {
  var form = document.getElementById("upload");
  watchAll();
  if (!form) return;
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var live = document.getElementById("live"), data = new FormData(form);
    var file = form.querySelector("input[type=file]").files[0];
    live.textContent = "uploading " + (file ? file.name : "");
    fetch("/upload", { method: "POST", body: data, headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.json().then(function (j) { return [r, j]; }); })
      .then(function (got) {
        var r = got[0], j = got[1];
        if (r.status !== 202) { live.textContent = j.error || ("refused: " + r.status); return; }
        live.textContent = (file ? file.name : "the upload") + ": queued (" + j.place + " in line)";
        form.reset();
        refresh();
      })
      .catch(function (e) { live.textContent = "upload failed: " + e; });
  });
}

function classPage() {
  var table = document.getElementById("class");
  if (!table) return;
  var es = new EventSource("/api/class/events"), busy = false, again = false;
  // the table, the counts by cause and the pairs, as the server renders them now (one fetch at a
  // time: a burst of grades is one more fetch, not one each)
  function reload() {
    if (busy) { again = true; return; }
    busy = true;
    fetch("/", { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html");
      ["causes", "similarity"].forEach(function (id) {
        var now = document.getElementById(id), got = fresh.getElementById(id);
        if (now && got) now.innerHTML = got.innerHTML;
      });
      var got = fresh.getElementById("class");
      if (got) table.tBodies[0].innerHTML = got.tBodies[0].innerHTML;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) { r.setAttribute("data-updated", "1"); });
      localTimes(document);
    }).catch(function () {}).then(function () {
      busy = false;
      if (again) { again = false; reload(); }
    });
  }
  es.addEventListener("student", reload);
}

document.addEventListener("DOMContentLoaded", function () { localTimes(document); studentPage(); classPage(); });
