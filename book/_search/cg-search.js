/* Search in the companion book: Sphinx's `html_search_scorer` (_config.yml), which Sphinx writes into its
   language_data.js (every page loads it, for the search field). Not under _static/: Jupyter Book adds every
   script there to every page, which would declare all of this twice.
   - Ranking: Sphinx searches the words of a query alone and drops its numbers, so "Theorem 6" is a search for
     "theorem", and the Theorem 6 page came after the others. A result whose title holds the whole query as a
     phrase ("Theorem 6", not "Theorem 60") ranks first, a page before its sections.
   - Snippets: a result's snippet is cut from its page's HTML, where a formula is still TeX ("\(\mathbf G_Q\)")
     until MathJax typesets it; here it is written as text (G_Q, ‖·‖, ≤, ∂, Greek letters).
   `make book-check` reads neither (the search page is not a page of the book); tests/tools/test_tools_search.py
   runs both in Chromium. */
"use strict";

var Scorer = {
  // Sphinx's defaults (searchtools.js defines them only where no Scorer is given)
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {0: 15, 1: 5, 2: -5},
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
  // the result is [docname, title, anchor, descr, score, filename]
  score: (result) => {
    const [, title, anchor, , score] = result;
    const query = (new URLSearchParams(window.location.search).get("q") || "").trim().replace(/\s+/g, " ");
    if (!query.includes(" ") || !title) return score;
    const escaped = query.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const phrase = new RegExp("(^|[^\\w])" + escaped + "(?![\\w])", "i");
    if (!phrase.test(title.replace(/\s+/g, " "))) return score;
    return score + 100 + (anchor ? 0 : 50);
  },
};

// TeX of a formula as text: the commands a reader would read as symbols, the rest without its backslash and braces
var CG_TEX_SYMBOLS = {
  alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η", theta: "θ",
  lambda: "λ", mu: "μ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", xi: "ξ", psi: "ψ",
  omega: "ω", Phi: "Φ", Psi: "Ψ", Sigma: "Σ", Delta: "Δ", Lambda: "Λ", Omega: "Ω", Xi: "Ξ", Gamma: "Γ",
  partial: "∂", nabla: "∇", lVert: "‖", rVert: "‖", Vert: "‖", lvert: "|", rvert: "|", mid: "|", le: "≤",
  leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈", equiv: "≡", propto: "∝", otimes: "⊗",
  circ: "∘", times: "×", cdot: "·", cdots: "…", ldots: "…", dots: "…", to: "→", infty: "∞", sum: "Σ",
  ell: "ℓ", in: "∈", top: "ᵀ", leftrightarrow: "↔", quad: " ", qquad: " ", min: "min", max: "max",
};

function cgUntex(tex) {
  let t = tex;
  for (let k = 0; k < 4; k++) {  // nested fractions and roots, innermost first
    t = t.replace(/\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)").replace(/\\sqrt\{([^{}]*)\}/g, "√($1)");
  }
  t = t.replace(/\\\\/g, " ").replace(/\\(?:begin|end)\{[^{}]*\}/g, " ")
    .replace(/\\(?:left|right|big|Big|bigg|Bigg)\b/g, "")
    .replace(/\\(?:mathbf|boldsymbol|mathrm|mathcal|mathbb|operatorname|text|textbf|rm)\b\s*/g, " ")
    .replace(/\\([A-Za-z]+)\s*/g, (m, name) => (name in CG_TEX_SYMBOLS ? CG_TEX_SYMBOLS[name] : name))
    .replace(/\\[,;:! ]/g, " ").replace(/&/g, " ")
    .replace(/([_^])\{([^{}]*)\}/g, "$1$2").replace(/[{}]/g, "");
  return t.replace(/\s+/g, " ").trim();
}

// a page's text with each formula written as text (\(…\) inline, \[…\] displayed)
function cgTextOfFormulas(text) {
  return text.replace(/\\\(([\s\S]*?)\\\)/g, (m, tex) => cgUntex(tex))
    .replace(/\\\[([\s\S]*?)\\\]/g, (m, tex) => cgUntex(tex));
}

document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText || Search.htmlToText.cgText) return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => cgTextOfFormulas(htmlToText(htmlString, anchor));
  Search.htmlToText.cgText = true;
});
