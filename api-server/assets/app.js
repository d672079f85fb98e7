// terrace web view: streams run logs and follows a run's status. Pages work without it.
(function () {
  "use strict";
  const status = document.getElementById("run-status");
  const logs = Array.from(document.querySelectorAll("pre[data-log]"));
  if (!status || status.dataset.final === "true") {
    return;
  }
  const since = status.dataset.status;
  function poll(pre) {
    if (pre.dataset.done === "true") {
      return;
    }
    const url = pre.dataset.log + "?offset=" + encodeURIComponent(pre.dataset.offset || "0");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (chunk) {
        if (!chunk) {
          return;
        }
        if (chunk.text) {
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.textContent += chunk.text;
          if (atEnd) {
            pre.scrollTop = pre.scrollHeight;
          }
        }
        pre.dataset.offset = String(chunk.next);
        if (chunk.done) {
          pre.dataset.done = "true";
        }
        if (chunk.status && chunk.status !== since) {
          // A new state brings new buttons, a new phase or the end: show them.
          window.location.reload();
        }
      })
      .catch(function () {});
  }
  function tick() {
    if (logs.length === 0) {
      fetch(window.location.pathname + "/log/plan?offset=0", { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (c) { if (c && c.status && c.status !== since) { window.location.reload(); } })
        .catch(function () {});
    }
    logs.forEach(poll);
  }
  window.setInterval(tick, 1000);
})();
