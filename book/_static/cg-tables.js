/* The companion book: ids that break only where they are joined, and phone cards that keep their labels.
   - A check id or file name in code (no spaces) gets a line-break opportunity (<wbr>) after each ".", "/",
     "_", "@" and "-", and each piece between them is kept whole (span.cg-nobr): it never breaks mid-word
     ("sec2.layernorm_definitio|n", "block_forward()|['U']").
     Copying the id copies it unchanged (<wbr> is no character). In code with spaces (an error message) a
     word of 24 characters or more gets the same ("aten::_scaled_dot_product_flash_attention_for_cpu_backward").
   - Each cell of a table gets its column's header as `data-label`; where a table becomes cards on a phone
     (custom.css), each cell shows its label above it.
   `make book-check` measures both at 1440 and 390 px. */
(function () {
  "use strict";
  var JOINS = /([./_@-])/;
  var LONG = 24;  // in code with spaces, a word this long may break at its joins
  function breakIds() {
    document.querySelectorAll("article code").forEach(function (c) {
      if (c.getAttribute("data-cg-wbr") || c.closest("pre")) return;
      var text = c.textContent;
      if (!JOINS.test(text)) return;
      // code with spaces (a message) breaks at its spaces; only its long words get the joins' opportunities
      var spaced = /\s/.test(text.trim());
      var walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), nodes = [];
      while (walker.nextNode()) nodes.push(walker.currentNode);
      nodes.forEach(function (n) {
        if (spaced && (/\s/.test(n.nodeValue.trim()) || n.nodeValue.length < LONG)) return;
        var parts = n.nodeValue.split(JOINS);
        if (parts.length < 2) return;
        var frag = document.createDocumentFragment();
        parts.forEach(function (p) {
          if (!p) return;
          if (p.length === 1 && JOINS.test(p)) {
            frag.appendChild(document.createTextNode(p));
            frag.appendChild(document.createElement("wbr"));
            return;
          }
          // a piece between joins never breaks, also where the browser sees an opportunity inside it
          // ("forward()['U']" between ")" and "[")
          var piece = document.createElement("span");
          piece.className = "cg-nobr";
          piece.textContent = p;
          frag.appendChild(piece);
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
