"""The scripts :mod:`.page_checks` runs in a page opened in headless Chromium: each measures one thing a reader
sees (images and MathJax settled, the page's chrome, raw TeX and verdicts, widths on a phone, formulas and figures
wider than their box, badges and cards, the landing's first screen) and returns it as plain JSON; the rules that
turn the measurements into problems are Python, in :mod:`.page_checks`."""
from __future__ import annotations

__all__ = ["SETTLE_JS", "CHROME_JS", "DESKTOP_JS", "PHONE_JS", "MATH_JS", "LAYOUT_JS", "FIGURES_JS", "FIRST_SCREEN_JS"]

SETTLE_JS = """async (ms) => {
  // every image loaded or failed (lazy ones too), then MathJax's first typeset when MathJax is on the page
  const imgs = [...document.images];
  for (const img of imgs) if (img.loading === 'lazy') img.loading = 'eager';
  await Promise.all(imgs.map(img => img.complete ? null : new Promise(r => {
    img.addEventListener('load', r, {once: true}); img.addEventListener('error', r, {once: true});
    setTimeout(r, 5000); })));
  const hasMath = !!document.querySelector('span.math, div.math');
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return hasMath ? 'absent' : 'none';
  const timeout = new Promise(r => setTimeout(() => r('timeout'), ms));
  try { return await Promise.race([mj.startup.promise.then(() => 'ok'), timeout]); }
  catch (e) { return 'error: ' + e; }
}"""

# what a reader sees of the page's chrome: its search boxes and its footer
CHROME_JS = """() => {
  const shown = (e) => {
    if (e.closest('dialog:not([open])')) return false;
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && cs.display !== 'none' && cs.opacity !== '0';
  };
  const search = new Set();
  document.querySelectorAll('input[type=search], .search-button-field, button.search-button').forEach((e) => {
    if (shown(e)) search.add(e);
  });
  const footers = [...document.querySelectorAll('footer, .bd-footer-content, .extra_footer')].filter(shown);
  const paper = footers.some((f) => f.querySelector('a[href^="https://arxiv.org/abs/"]'));
  return {search: [...search].map((e) => e.tagName.toLowerCase() + '.' + [...e.classList].join('.')),
          footer: footers.length > 0, paper};
}"""

DESKTOP_JS = """async (smoke) => {
  const out = {broken: [], merror: [], verdicts: [], text: ''};
  for (const img of document.images) {
    if (img.naturalWidth > 0) continue;
    const src = img.currentSrc || img.getAttribute('src') || '';
    if (/\\.svg($|[?#])/i.test(src)) {            // an SVG without intrinsic size: ask the server
      try { if ((await fetch(src)).ok) continue; } catch (e) {}
    }
    out.broken.push(src.startsWith('data:') ? src.slice(0, 40) + '…' : (img.getAttribute('src') || '(no src)'));
  }
  for (const e of document.querySelectorAll('mjx-merror')) {
    out.merror.push((e.getAttribute('data-mjx-error') || '') + ' | ' + (e.textContent || '').trim().slice(0, 80));
  }
  if (smoke) for (const e of document.querySelectorAll('.cg-verdict')) {
    out.verdicts.push({result: e.getAttribute('data-result') || '', verdict: e.getAttribute('data-verdict') || '',
                       text: (e.innerText || e.textContent || '').trim().slice(0, 100)});
  }
  // the rendered text, without code, scripts and typeset math
  const style = document.createElement('style');
  style.textContent = 'pre, code, kbd, samp, textarea, script, style, mjx-container { display: none !important; }';
  document.head.appendChild(style);
  try { out.text = document.body ? document.body.innerText : ''; } finally { style.remove(); }
  return out;
}"""

PHONE_JS = """() => {
  const vw = document.documentElement.clientWidth;
  const out = [];
  const clipped = (el) => {
    // content of el (or of a box around it, up to the article) cut off or scrolled out of sight
    for (let e = el; e && e !== document.body && e !== document.documentElement; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX !== 'visible' && e.scrollWidth > e.clientWidth + 1) return true;
      if (e.matches('article, main, [role=main]')) break;
    }
    return false;
  };
  document.querySelectorAll('table').forEach((t, i) => {
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return;           // not shown on this page
    let right = r.right;
    for (const c of t.querySelectorAll('th, td')) right = Math.max(right, c.getBoundingClientRect().right);
    const wide = r.width > vw + 0.5 || right > vw + 0.5;
    const cut = clipped(t);
    if (!wide && !cut) return;
    const th = t.querySelector('th') || t.querySelector('td');
    out.push({i, header: th ? (th.innerText || th.textContent || '').trim().slice(0, 60) : '',
              width: Math.round(Math.max(r.width, t.scrollWidth)), right: Math.round(right), vw, wide, cut});
  });
  // the page itself wider than the screen: the reader has to scroll sideways (e.g. a long inline formula)
  const page = document.documentElement.scrollWidth;
  let widest = null;
  if (page > vw + 1) {
    const inClippedBox = (e) => {
      for (let a = e.parentElement; a; a = a.parentElement) if (getComputedStyle(a).overflowX !== 'visible') return true;
      return false;
    };
    document.querySelectorAll('article *').forEach((e) => {
      const r = e.getBoundingClientRect();
      if (r.width > 0 && r.right > vw + 1 && !e.closest('table') && !inClippedBox(e) && (!widest || r.right > widest.right))
        widest = {right: Math.round(r.right), tag: e.tagName.toLowerCase(),
                  text: (e.innerText || e.textContent || '').trim().slice(0, 60)};
    });
  }
  return {tables: out, page, vw, widest};
}"""


# every typeset formula whose content is wider than its box: scrolled inside its own box with the cue that
# book/_static/cg-math.js shows (class cg-scrolls, a visible ::before), or cut off (its own box, or a box
# around it, clips it) with no cue; with its TeX source, from MathJax's list of the page's formulas
MATH_JS = """async (ms) => {
  if (window.cgMathReady) await Promise.race([window.cgMathReady, new Promise((r) => setTimeout(r, ms))]);
  const mj = window.MathJax, doc = mj && mj.startup && mj.startup.document;
  const tex = new Map();
  if (doc && doc.getMathItemsWithin) for (const it of doc.getMathItemsWithin(document.body)) {
    if (it.typesetRoot) tex.set(it.typesetRoot, it.math);
  }
  const out = [];
  document.querySelectorAll('article mjx-container').forEach((m) => {
    const r = m.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return;
    const ox = getComputedStyle(m).overflowX;
    const over = m.scrollWidth > m.clientWidth + 1;      // its content is wider than its own box
    const own = over && ox !== 'visible';                // ... and the box scrolls (or clips) it
    let cut = over;                                      // content spilling out of a visible box is cut too
    if (!over) for (let e = m.parentElement; e && !e.matches('article'); e = e.parentElement) {
      if (getComputedStyle(e).overflowX === 'visible') continue;
      const b = e.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) { cut = true; break; }
    }
    if (!cut) return;
    const before = getComputedStyle(m, '::before');
    const cue = own && ox !== 'hidden' && m.classList.contains('cg-scrolls')
      && before.content.includes('scroll') && before.display !== 'none' && before.visibility !== 'hidden';
    const src = (tex.get(m) || (m.querySelector('mjx-assistive-mml') || m).textContent || '').replace(/\\s+/g, ' ').trim();
    out.push({cue, own, display: m.getAttribute('display') === 'true', tex: src.slice(0, 100),
              content: Math.round(m.scrollWidth), box: Math.round(m.clientWidth)});
  });
  return out;
}"""


# verdict badges on more than two lines; phone cards (cells shown one under another) without their column's
# label; code (ids, file names) broken inside a word, not after one of the joins cg-tables.js marks
LAYOUT_JS = """() => {
  const out = {badges: [], cards: [], ids: []};
  document.querySelectorAll('article .cg-badge[data-result]').forEach((b) => {
    const r = b.getBoundingClientRect();
    if (r.height === 0) return;
    const lh = parseFloat(getComputedStyle(b).lineHeight) || 16;
    const lines = Math.round(r.height / lh);
    if (lines > 2) out.badges.push({verdict: b.getAttribute('data-verdict'), lines});
  });
  document.querySelectorAll('article table').forEach((t, i) => {
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    t.querySelectorAll('tbody tr').forEach((tr) => [...tr.children].forEach((td, j) => {
      if (getComputedStyle(td).display !== 'block' || !heads[j] || !td.textContent.trim()) return;
      const c = getComputedStyle(td, '::before').content;
      if (!c || c === 'none' || c === 'normal' || c === '""')
        out.cards.push({table: i + 1, column: heads[j], text: td.textContent.trim().slice(0, 40)});
    }));
  });
  const JOIN = /[./_@-]/;
  document.querySelectorAll('article code').forEach((c) => {
    if (c.closest('pre')) return;
    const text = c.textContent;
    if (/\\s/.test(text.trim()) || c.getClientRects().length < 2) return;
    const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
    const chars = [];
    while (walker.nextNode()) { const n = walker.currentNode; for (let k = 0; k < n.length; k++) chars.push([n, k]); }
    let top = null;
    for (let k = 0; k < chars.length; k++) {
      const range = document.createRange();
      range.setStart(chars[k][0], chars[k][1]); range.setEnd(chars[k][0], chars[k][1] + 1);
      const r = range.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (top !== null && r.top > top + 1) {
        const prev = chars[k - 1][0].data[chars[k - 1][1]];
        if (!JOIN.test(prev)) { out.ids.push({text: text.slice(0, 80), at: k}); break; }
      }
      top = r.top;
    }
  });
  return out;
}"""


# every figure (img.cg-img): the width it is shown at, the full-size PNG it links to, and whether its box
# (.cg-figure-scroll) cuts it off, scrolls it with the cue cg-figures.js adds, or shows all of it
FIGURES_JS = """async (ms) => {
  if (window.cgFiguresReady) await Promise.race([window.cgFiguresReady, new Promise((r) => setTimeout(r, ms))]);
  const out = [];
  document.querySelectorAll('img.cg-img').forEach((img, i) => {
    const r = img.getBoundingClientRect();
    const fig = img.closest('figure');
    const a = img.closest('a[href]');
    const box = img.closest('.cg-figure-scroll');
    let cut = false, cue = false;
    for (let e = img.parentElement; e && !e.matches('article'); e = e.parentElement) {
      if (getComputedStyle(e).overflowX === 'visible') continue;
      const b = e.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) { cut = true; break; }
    }
    if (cut && box) {
      const before = getComputedStyle(box, '::before');
      cue = box.classList.contains('cg-scrolls') && getComputedStyle(box).overflowX !== 'hidden'
        && before.content.includes('scroll') && before.display !== 'none' && before.visibility !== 'hidden';
    }
    out.push({i, id: (fig && fig.id) || img.id || '', alt: img.getAttribute('alt') || '',
              src: img.getAttribute('src') || '', widthIn: img.dataset.widthIn || '', minPt: img.dataset.minPt || '',
              width: r.width, shown: r.width > 0 && r.height > 0,
              link: a ? a.href : '', cut, cue});
  });
  return out;
}"""


# the landing's first screen: the verdict tally and the top of the claims table (tools/book/tables.claims_md)
FIRST_SCREEN_JS = """() => {
  const top = (sel) => { const e = document.querySelector(sel);
    return e ? e.getBoundingClientRect().top + window.scrollY : -1; };
  return {tally: top('p.cg-tally'), claims: top('p.cg-tally ~ * table, p.cg-tally + * table, table')};
}"""
