/* The companion book: ids that break only where they are joined, and phone cards that keep their labels.
   - A check id or file name in code (no spaces) gets a line-break opportunity (<wbr>) after each ".", "/",
     "_", "@" and "-", and CSS keeps its words whole: it never breaks mid-word ("sec2.layernorm_definitio|n").
     Copying the id copies it unchanged (<wbr> is no character).
   - Each cell of a table gets its column's header as `data-label`; where a table becomes cards on a phone
     (custom.css), each cell shows its label above it.
   `make book-check` measures both at 1440 and 390 px. */
(function () {
  "use strict";
  var JOINS = /([./_@-])/;
  function breakIds() {
    document.querySelectorAll("article code").forEach(function (c) {
      if (c.getAttribute("data-cg-wbr") || c.closest("pre")) return;
      var text = c.textContent;
      if (/\s/.test(text.trim()) || !JOINS.test(text)) return;
      var walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), nodes = [];
      while (walker.nextNode()) nodes.push(walker.currentNode);
      nodes.forEach(function (n) {
        var parts = n.nodeValue.split(JOINS);
        if (parts.length < 2) return;
        var frag = document.createDocumentFragment();
        parts.forEach(function (p) {
          if (!p) return;
          frag.appendChild(document.createTextNode(p));
          if (p.length === 1 && JOINS.test(p)) frag.appendChild(document.createElement("wbr"));
        });
        n.parentNode.replaceChild(frag, n);
      });
      c.setAttribute("data-cg-wbr", "1");
    });
  }
  function labelCells() {
    document.querySelectorAll("article table").forEach(function (t) {
      var heads = Array.prototype.map.call(t.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      if (!heads.length) return;
      t.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (td, i) {
          if (heads[i]) td.setAttribute("data-label", heads[i]);
        });
      });
    });
  }
  function run() {
    breakIds();
    labelCells();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
  else run();
})();
