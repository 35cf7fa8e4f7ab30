/* The companion book: a formula wider than its box scrolls inside it, and says so.
   Every typeset formula that is a scroll box (display formulas always, inline ones on a phone; see custom.css)
   and whose content is wider than the box gets the class `cg-scrolls`: CSS then shows the cue above it and a
   scrollbar that stays visible. Re-measured when the window is resized. `make book-check` waits for
   `window.cgMathReady` and fails a formula that overflows its box without the cue. */
(function () {
  "use strict";
  var CUE = "\u27f7 scroll sideways: the formula continues";
  function scrolls(m) {
    var ox = getComputedStyle(m).overflowX;
    return ox === "auto" || ox === "scroll";
  }
  function mark() {
    // a table that its formulas (which cannot wrap) make wider than the column gets fixed column widths:
    // its formulas then scroll inside their cells, with the cue, instead of the table scrolling out of sight
    document.querySelectorAll("article table").forEach(function (t) {
      var p = t.parentElement;
      if (p && !t.classList.contains("cg-fixed") && t.getBoundingClientRect().width > p.clientWidth + 1) {
        t.classList.add("cg-fixed");
        // not equal widths: a column of formulas gets twice the share of a column of words
        var rows = t.querySelectorAll("tr"), heads = t.querySelectorAll("thead th");
        if (heads.length) {
          var weight = Array.prototype.map.call(heads, function (th, i) {
            return Array.prototype.some.call(rows, function (tr) {
              var c = tr.children[i];
              return c && c.querySelector("mjx-container");
            }) ? 2 : 1;
          });
          var total = weight.reduce(function (a, b) { return a + b; }, 0);
          heads.forEach(function (th, i) { th.style.width = (100 * weight[i] / total).toFixed(1) + "%"; });
        }
      }
    });
    // an inline formula longer than its line becomes its own scroll box (it cannot wrap)
    document.querySelectorAll("mjx-container:not([display='true'])").forEach(function (m) {
      var p = m.parentElement;
      if (p && !m.classList.contains("cg-wide-inline") && m.scrollWidth > p.clientWidth + 1) {
        m.classList.add("cg-wide-inline");
      }
    });
    document.querySelectorAll("mjx-container").forEach(function (m) {
      var over = scrolls(m) && m.scrollWidth > m.clientWidth + 1;
      m.classList.toggle("cg-scrolls", over);
      if (over) {
        m.setAttribute("data-cg-cue", CUE);
        m.setAttribute("title", CUE);
      } else {
        m.removeAttribute("data-cg-cue");
      }
    });
    return true;
  }
  window.cgMarkMath = mark;
  window.cgMathReady = new Promise(function (resolve) {
    function afterTypeset() {
      var mj = window.MathJax, p = mj && mj.startup && mj.startup.promise;
      (p || Promise.resolve()).then(function () { resolve(mark()); }, function () { resolve(mark()); });
    }
    if (document.readyState === "complete") afterTypeset();
    else window.addEventListener("load", afterTypeset);
  });
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(mark, 150);
  });
})();
