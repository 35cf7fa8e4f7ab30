"""Worker for the reproduce kill test: ``curvature-gap reproduce`` (argv[2:]) that holds to be killed
(tests/reliability/hold.py) while it writes the record (.json) of result argv[1]: that result's arrays (.npz)
are then on disk, its record only in a temporary file."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hold import hold_while_writing  # noqa: E402

from curvature_gap.cli import main  # noqa: E402

if __name__ == "__main__":
    figure = sys.argv[1]
    hold_while_writing(lambda path: path.parent.name == figure and path.suffix == ".json")
    sys.argv = ["curvature-gap", *sys.argv[2:]]
    sys.exit(main(sys.argv[1:]))
