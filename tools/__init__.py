"""Project tooling that is not part of the installed ``curvature_gap`` package (the book build)."""
