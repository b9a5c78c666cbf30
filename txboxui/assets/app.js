// txbox dashboard: refreshes the server-rendered figures every few seconds
// (the server escapes every value), and asks before a discard. No framework,
// no network access beyond this server.
(function () {
  "use strict";
  var every = 5000;
  var main = document.getElementById("main");

  function confirmDiscards(root) {
    root.querySelectorAll("form.confirm").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.getAttribute("data-confirm"))) {
          e.preventDefault();
        }
      });
    });
  }

  function refresh() {
    if (document.hidden) {
      return;
    }
    fetch("./?fragment=1", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        main.innerHTML = html;
        confirmDiscards(main);
        var t = document.getElementById("updated");
        t.textContent = new Date().toISOString().replace("T", " ").slice(0, 19) + "Z";
        document.getElementById("live").classList.remove("stale");
      })
      .catch(function () {
        document.getElementById("live").classList.add("stale");
      });
  }

  confirmDiscards(document);
  // The result of an action is shown once: drop it from the address.
  if (window.location.search) {
    window.history.replaceState(null, "", window.location.pathname);
  }
  // A dead message's own page (no live figures) is not refreshed.
  if (document.getElementById("updated")) {
    window.setInterval(refresh, every);
  }
})();
