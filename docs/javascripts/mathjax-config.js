// pymdownx.arithmatex (generic mode) wraps maths in \( \) and \[ \] inside .arithmatex elements;
// MathJax typesets only those. Loaded before the vendored tex-svg.js (mkdocs.yml extra_javascript).
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true,
         processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
  svg: { fontCache: "global" }
};
// the instant navigation of the theme swaps page contents without a reload: typeset again
if (typeof document$ !== "undefined") {
  document$.subscribe(function () { if (window.MathJax && MathJax.typesetPromise) { MathJax.typesetPromise(); } });
}
