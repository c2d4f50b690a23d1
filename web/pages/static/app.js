// fencecron dashboard: keeps a server-rendered page live. It listens to
// /api/v1/events (server-sent events) and, after each change, fetches the
// page's <main> again (header X-Fencecron-Fragment: main) and swaps it in.
// Job buttons post through fetch with the session's CSRF token; without
// script they are plain forms that work too.
(function () {
  "use strict";
  var body = document.body;
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var toast = document.getElementById("toast");

  function say(text, isError) {
    if (!toast) return;
    var d = document.createElement("div");
    d.textContent = text;
    if (isError) d.className = "err";
    toast.appendChild(d);
    setTimeout(function () { d.remove(); }, isError ? 8000 : 4000);
  }

  // Refresh <main>, at most one request in flight and one queued.
  var busy = false, again = false, timer = null;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, { headers: { "X-Fencecron-Fragment": "main" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status + " " + r.statusText); return r.text(); })
      .then(function (html) {
        var open = {};
        main.querySelectorAll("details[open][data-key]").forEach(function (d) { open[d.dataset.key] = true; });
        var before = {};
        main.querySelectorAll("tr[data-attempt]").forEach(function (tr) { before[tr.dataset.attempt] = true; });
        var active = document.activeElement && main.contains(document.activeElement) && document.activeElement.name;
        main.innerHTML = html;
        main.querySelectorAll("details[data-key]").forEach(function (d) { if (open[d.dataset.key]) d.open = true; });
        main.querySelectorAll("tr[data-attempt]").forEach(function (tr) { if (!before[tr.dataset.attempt]) tr.classList.add("flash"); });
        if (active) { var el = main.querySelector("[name='" + active + "']"); if (el) el.focus(); }
        body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
      })
      .catch(function (e) { if (live) { live.textContent = "refresh failed: " + e.message; live.className = "live off"; } })
      .finally(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
  }
  function schedule() {
    if (timer) return;
    timer = setTimeout(function () { timer = null; refresh(); }, 200);
  }

  // The browser reconnects a dropped stream by itself, but gives up on
  // an answer other than 200, such as 503 when the node already serves
  // its most event streams: then connect again after a while.
  var lastCluster = null;
  function connect() {
    var es = new EventSource("/api/v1/events?after=" + encodeURIComponent(body.dataset.eventSeq || "0"));
    es.onopen = function () { if (live) { live.textContent = "live"; live.className = "live on"; } };
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED) {
        if (live) { live.textContent = "no live updates (node busy); retrying in 30s"; live.className = "live off"; }
        setTimeout(connect, 30000);
        return;
      }
      if (live) { live.textContent = "reconnecting…"; live.className = "live off"; }
    };
    es.addEventListener("audit", function (e) { body.dataset.eventSeq = e.lastEventId; schedule(); });
    es.addEventListener("cluster", function (e) {
      try {
        var c = JSON.parse(e.data);
        var l = document.getElementById("leader"), ep = document.getElementById("epoch");
        if (l) l.textContent = c.leader || "none";
        if (ep) ep.textContent = c.epoch;
      } catch (err) { /* keep the old header */ }
      if (lastCluster !== null && lastCluster !== e.data) schedule();
      lastCluster = e.data;
    });
  }
  if (body.dataset.live === "true" && window.EventSource) connect();

  // A running attempt's output (the attempt page): ask the node every
  // second for what the worker kept from where the page left off, and
  // append it as text (never as markup). A refresh of <main> renders the
  // streams anew with their offsets, and this goes on from there.
  var maxShown = 256 * 1024;
  function pollOutput() {
    var out = document.getElementById("stdout"), err = document.getElementById("stderr");
    if (!out || !err || out.dataset.final === "true" || !window.fetch) { setTimeout(pollOutput, 1000); return; }
    var q = "stdout_from=" + encodeURIComponent(out.dataset.next || "0") + "&stderr_from=" + encodeURIComponent(err.dataset.next || "0");
    fetch("/api/v1/attempts/" + encodeURIComponent(out.dataset.attempt) + "/output?" + q, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status + " " + r.statusText); return r.json(); })
      .then(function (o) {
        if (document.getElementById("stdout") !== out) return; // the page was refreshed meanwhile
        [[out, o.stdout], [err, o.stderr]].forEach(function (p) {
          var el = p[0], c = p[1];
          if (o.final || c.skipped || String(c.from) !== el.dataset.next) el.textContent = c.text;
          else if (c.text) el.textContent += c.text;
          if (el.textContent.length > maxShown) el.textContent = el.textContent.slice(-maxShown);
          el.dataset.next = String(c.next);
        });
        if (o.final) { out.dataset.final = err.dataset.final = "true"; schedule(); }
      })
      .catch(function () { /* try again on the next tick */ })
      .finally(function () { setTimeout(pollOutput, 1000); });
  }
  if (document.getElementById("stdout")) pollOutput();

  // Job buttons: POST through fetch, say what happened, refresh.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains("act") || !window.fetch) return;
    ev.preventDefault();
    var button = form.querySelector("button");
    if (button) button.disabled = true;
    var headers = { "Accept": "application/json" };
    if (body.dataset.csrf) headers["X-Fencecron-CSRF"] = body.dataset.csrf;
    fetch(form.action, { method: "POST", headers: headers, credentials: "same-origin" })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (j) {
          if (!r.ok) throw new Error(j.error || (r.status + " " + r.statusText));
          return j;
        });
      })
      .then(function (j) {
        var action = button ? button.dataset.action : "";
        if (action === "trigger") {
          var a = j.attempts && j.attempts[j.attempts.length - 1];
          say("run " + j.id + (a ? ": attempt " + a.number + " to " + a.worker + " with token " + a.token.epoch + "." + a.token.seq : ": " + j.state));
        } else {
          say("job " + j.job + (j.paused ? " paused" : " resumed"));
        }
        refresh();
      })
      .catch(function (e) { say(e.message, true); })
      .finally(function () { if (button) button.disabled = false; });
  });
})();
