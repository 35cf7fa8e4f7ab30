/* The companion book: a figure never shrinks below the width at which its smallest text is 7 pt.
   curvature_gap.notebook.show_figure gives each figure's image that floor as its min-width; where the
   column is narrower (a phone), the figure's box (`.cg-figure-scroll`) scrolls sideways. Such a box gets the
   class `cg-scrolls` and a cue that custom.css shows above it; a tap on the figure opens it at full size.
   Re-measured when the window is resized or an image loads. `make book-check` waits for
   `window.cgFiguresReady` and fails a figure drawn below 7 pt, or one that is cut off without the cue. */
(function () {
  "use strict";
  var CUE = "\u27f7 scroll sideways, or tap the figure to open it at full size";
  function mark() {
    document.querySelectorAll(".cg-figure-scroll").forEach(function (box) {
      var over = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("cg-scrolls", over);
      if (over) box.setAttribute("data-cg-cue", CUE);
      else box.removeAttribute("data-cg-cue");
    });
    return true;
  }
  window.cgMarkFigures = mark;
  window.cgFiguresReady = new Promise(function (resolve) {
    function ready() {
      var imgs = Array.prototype.slice.call(document.querySelectorAll(".cg-figure-scroll img"));
      Promise.all(imgs.map(function (img) {
        return img.complete ? Promise.resolve() : new Promise(function (r) {
          img.addEventListener("load", r, {once: true});
          img.addEventListener("error", r, {once: true});
        });
      })).then(function () { resolve(mark()); });
    }
    if (document.readyState === "complete") ready();
    else window.addEventListener("load", ready);
  });
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(mark, 150);
  });
  // a printed page (or PDF) shows a verdict's folded evidence in full
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details.cg-more").forEach(function (d) { d.open = true; });
  });
})();
