// stageline dashboard: live refresh, countdowns and form checks. Plain JS, no dependency.
(function () {
  "use strict";
  var body = document.body;

  function visible() { return document.visibilityState !== "hidden"; }

  function get(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html-fragment" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); });
  }

  // The runs list: its rows are fetched again every few seconds.
  var table = document.getElementById("runs-table");
  if (table) {
    var dot = document.getElementById("live-dot");
    setInterval(function () {
      if (!visible()) { return; }
      get(table.getAttribute("data-rows-url")).then(function (html) {
        document.getElementById("runs-rows").innerHTML = html;
        if (dot) { dot.classList.remove("off"); }
      }).catch(function () { if (dot) { dot.classList.add("off"); } });
    }, 4000);
  }

  // A run page: graph, timeline and events follow the run until it ends.
  var runId = body.getAttribute("data-run-id");
  function dirty() {
    var fields = document.querySelectorAll("form textarea, form input[type=text]");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value && fields[i].value !== fields[i].defaultValue) { return true; }
    }
    var active = document.activeElement;
    return !!(active && active.closest && active.closest("form"));
  }
  if (runId && body.getAttribute("data-ended") !== "true") {
    var prefix = body.getAttribute("data-prefix");
    var seq = parseInt(body.getAttribute("data-last-seq") || "0", 10);
    var live = document.getElementById("live");
    var started = live ? live.getAttribute("data-run-status") : null;
    var timer = setInterval(function () {
      if (!visible()) { return; }
      get(prefix + "/runs/" + encodeURIComponent(runId) + "/live?after=" + seq).then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#live");
        var old = document.getElementById("live");
        if (!fresh || !old) { return; }
        old.replaceWith(fresh);
        var events = document.getElementById("events");
        holder.querySelectorAll("#new-events li").forEach(function (li) {
          if (events) { events.appendChild(li); events.scrollTop = events.scrollHeight; }
        });
        seq = parseInt(fresh.getAttribute("data-last-seq") || String(seq), 10);
        var now = fresh.getAttribute("data-run-status");
        if (now !== started) {
          var ended = ["succeeded", "failed", "cancelled", "rejected"].indexOf(now) >= 0;
          if (ended) { clearInterval(timer); }
          if (!dirty()) { window.location.reload(); }
        }
      }).catch(function () { /* the next tick tries again */ });
    }, 2000);
  }

  // Deadlines count down.
  function fmt(s) {
    s = Math.abs(Math.round(s));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) { return d + "d " + h + "h"; }
    if (h) { return h + "h " + m + "m"; }
    return m + "m " + (s % 60) + "s";
  }
  function tick() {
    document.querySelectorAll("time.countdown").forEach(function (el) {
      var left = parseFloat(el.getAttribute("data-deadline")) - Date.now() / 1000;
      el.textContent = left >= 0 ? "in " + fmt(left) : "overdue by " + fmt(left);
      el.classList.toggle("overdue", left < 0);
    });
  }
  tick();
  setInterval(tick, 1000);

  // JSON fields are checked in the browser (and again by the server).
  var TYPES = { object: "object", array: "array", string: "string", number: "number",
                integer: "integer", boolean: "boolean" };
  function kindOf(v) {
    if (v === null) { return "null"; }
    if (Array.isArray(v)) { return "array"; }
    if (typeof v === "number") { return Number.isInteger(v) ? "integer" : "number"; }
    return typeof v;
  }
  function checkJson(el) {
    var out = el.parentNode.querySelector(".json-error");
    var want = TYPES[el.getAttribute("data-json")];
    var text = el.value.trim();
    var message = "";
    if (text) {
      try {
        var value = JSON.parse(text);
        var got = kindOf(value);
        if (want && got !== want && !(want === "number" && got === "integer")) {
          message = "must be a JSON " + want + ", not " + got;
        }
      } catch (e) {
        message = "not valid JSON: " + e.message;
      }
    }
    el.setCustomValidity(message);
    el.classList.toggle("invalid", !!message);
    if (out) { out.textContent = message; }
    return !message;
  }
  document.querySelectorAll("textarea[data-json]").forEach(function (el) {
    el.addEventListener("input", function () { checkJson(el); });
    checkJson(el);
  });

  // A request for changes needs a note (a response, its text: the field data-needs-note
  // names); a cancel asks first.
  document.querySelectorAll("button[data-needs-note]").forEach(function (btn) {
    btn.addEventListener("click", function (ev) {
      var field = btn.getAttribute("data-needs-note") || "note";
      var note = btn.form && btn.form.querySelector("textarea[name=" + field + "]");
      if (note && !note.value.trim()) {
        ev.preventDefault();
        note.setCustomValidity(btn.getAttribute("data-needs-message") || "Say what to change");
        note.reportValidity();
        note.addEventListener("input", function () { note.setCustomValidity(""); }, { once: true });
      }
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { ev.preventDefault(); }
    });
  });
  // A form is sent once.
  document.querySelectorAll("form[method=post]").forEach(function (form) {
    form.addEventListener("submit", function () {
      setTimeout(function () {
        form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      }, 0);
    });
  });
}());
