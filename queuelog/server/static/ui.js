// Optional auto-refresh of the jobs page: a checkbox whose choice survives reloads.
(function () {
  "use strict";
  var box = document.getElementById("autorefresh");
  if (!box) { return; }
  var KEY = "queuelog.autorefresh";
  var SECONDS = 10;
  var timer = null;
  box.parentNode.hidden = false;  // without JavaScript the control would do nothing
  try { box.checked = window.localStorage.getItem(KEY) === "1"; } catch (e) { box.checked = false; }
  function arm() {
    window.clearTimeout(timer);
    if (box.checked) { timer = window.setTimeout(reload, SECONDS * 1000); }
  }
  function reload() {
    // Never while someone types in a box or has a list open: wait for the next round.
    var el = document.activeElement;
    if (document.hidden || (el && el !== box && el.matches("input, select, textarea"))) {
      arm();
      return;
    }
    window.location.reload();
  }
  box.addEventListener("change", function () {
    try { window.localStorage.setItem(KEY, box.checked ? "1" : "0"); } catch (e) { /* private mode */ }
    arm();
  });
  arm();
}());
