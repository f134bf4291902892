// The course server's pages: an upload without leaving the page, each grade's progress as it comes
// (server-sent events), and the instructor's class table updated as grades finish.
"use strict";

function cell(text, cls) {
  var td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  return td;
}

function word(doc) {
  if (doc.status !== "graded") return doc.status;
  if (doc.correct && doc.tier) return doc.tier;
  return doc.correct ? "correct" : "incorrect";
}

function watch(row) {
  var id = row.getAttribute("data-id"), live = document.getElementById("live"), out = row.querySelector(".outcome");
  var es = new EventSource("/api/submissions/" + encodeURIComponent(id) + "/events");
  es.addEventListener("phase", function (e) {
    var d = JSON.parse(e.data), text = d.phase + (d.place ? " (" + d.place + " in line)" : "");
    out.textContent = text;
    row.setAttribute("data-state", d.phase);
    if (live) live.textContent = row.cells[1].textContent + ": " + text;
  });
  es.addEventListener("done", function (e) {
    es.close();
    var d = JSON.parse(e.data);
    if (d.state === "replaced") { out.textContent = "replaced by a newer upload"; row.setAttribute("data-state", "replaced"); return; }
    var w = word(d);
    out.textContent = w;
    out.className = "outcome " + w;
    row.setAttribute("data-state", "done");
    row.cells[3].textContent = d.fraction != null ? d.fraction.toFixed(3) : "";
    var a = document.createElement("a");
    a.href = "/submissions/" + encodeURIComponent(id) + "/report";
    a.textContent = "report";
    row.cells[4].textContent = "";
    row.cells[4].appendChild(a);
    if (live) live.textContent = row.cells[1].textContent + ": " + w;
    var best = document.getElementById("best"), bf = document.getElementById("best-fraction");
    if (best && d.best) {
      best.textContent = d.best;
      best.className = d.best;
      bf.textContent = d.best_fraction != null ? "(" + d.best_fraction.toFixed(3) + " of the copy floor)" : "";
    }
  });
}

function studentPage() {
  var form = document.getElementById("upload"), table = document.getElementById("attempts");
  if (!table) return;
  Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
    var s = row.getAttribute("data-state");
    if (s !== "done" && s !== "replaced") watch(row);
  });
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
        var row = document.createElement("tr");
        row.setAttribute("data-id", j.id);
        row.setAttribute("data-state", "queued");
        row.appendChild(cell(new Date().toLocaleString()));
        row.appendChild(cell(file ? file.name : ""));
        row.appendChild(cell("queued (" + j.place + " in line)", "outcome"));
        row.appendChild(cell(""));
        row.appendChild(cell(""));
        table.tBodies[0].insertBefore(row, table.tBodies[0].firstChild);
        Array.prototype.forEach.call(table.tBodies[0].rows, function (other) {
          if (other !== row && other.getAttribute("data-state") === "queued") {
            other.querySelector(".outcome").textContent = "replaced by a newer upload";
            other.setAttribute("data-state", "replaced");
          }
        });
        watch(row);
        form.reset();
      })
      .catch(function (e) { live.textContent = "upload failed: " + e; });
  });
}

function classPage() {
  var table = document.getElementById("class");
  if (!table) return;
  var es = new EventSource("/api/class/events");
  es.addEventListener("student", function (e) {
    var d = JSON.parse(e.data), row = null;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      if (r.getAttribute("data-student") === d.student) row = r;
    });
    if (!row) {
      row = document.createElement("tr");
      row.setAttribute("data-student", d.student);
      var name = document.createElement("td"), a = document.createElement("a");
      a.href = "/students/" + encodeURIComponent(d.student);
      a.textContent = d.student;
      name.appendChild(a);
      row.appendChild(name);
      for (var i = 0; i < 4; i++) row.appendChild(cell(""));
      table.tBodies[0].appendChild(row);
    }
    row.cells[1].textContent = d.best;
    row.cells[1].className = "best " + d.best;
    row.cells[2].textContent = d.fraction != null ? d.fraction.toFixed(3) : "";
    row.cells[3].textContent = d.attempts;
    row.cells[4].textContent = d.latest;
    row.setAttribute("data-updated", "1");
  });
}

document.addEventListener("DOMContentLoaded", function () { studentPage(); classPage(); });
