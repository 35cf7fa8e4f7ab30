"""The fault cases a user of this companion can hit, and what the program does in each.

The tests declare which fault they prove with a marker, ``@pytest.mark.fault("<id>")``; the test suite
fails when a fault has no test or a test names an unknown fault, ``pytest -m reliability`` runs exactly
those tests, and the maintainers' page ``docs/maintainers.md`` (``python -m tools.book maintainers``)
renders this table with the tests that prove each case (collected from the markers).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Fault", "FAULTS", "FAULT_IDS"]


@dataclass(frozen=True)
class Fault:
    id: str
    area: str
    case: str  # what goes wrong
    behaviour: str  # what the program does about it


FAULTS: tuple[Fault, ...] = (
    Fault('same-command-twice', 'determinism',
          'the same command is run twice with the same seed',
          'bit-identical checkpoints (sha256 of the weights) and identical result arrays; another seed gives other weights'),
    Fault('training-killed', 'interruption',
          'training is killed (SIGKILL) between two checkpoints or while writing one',
          'the rerun resumes from the last checkpoint (weights, optimiser, RNG, data order) and ends bit-identical to an uninterrupted run'),
    Fault('reproduce-killed', 'interruption',
          '`curvature-gap reproduce` is killed (SIGKILL) half-way',
          "the rerun reuses every finished figure's numbers, recomputes only the missing ones, and ends with the same numbers as an uninterrupted run"),
    Fault('killed-while-writing', 'interruption',
          'a process dies while writing a file',
          'every checkpoint, result and manifest is written to a temporary file and renamed into place, so a reader sees the old file or the new one, never half of one'),
    Fault('damaged-result', 'caches',
          'a cached result file is truncated, edited or deleted',
          'detected by its recorded sha256 and size; a StaleResultWarning names the file, and the numbers are recomputed'),
    Fault('damaged-checkpoint', 'caches',
          'a cached checkpoint is truncated',
          'detected (it fails to load or its hash differs); a warning names it and the model is retrained to the same weights'),
    Fault('setting-changed', 'caches',
          'a setting changes (profile, seed, learning rate, figure settings)',
          'the config hash changes, so old numbers and checkpoints are never reused; they stay on disk under their own hash'),
    Fault('replotting', 'caches',
          're-plotting a figure',
          'reads the stored numbers only; nothing is recomputed'),
    Fault('make-clean', 'caches',
          '`make clean`',
          'removes results/, runs/, _build/ and bytecode caches; never the datasets'),
    Fault('concurrent-runs', 'concurrency',
          'two `reproduce` runs at once on the same results directory',
          'a file lock per training run and per result: the second waits (and says so), then reuses what the first wrote; the manifest stays valid JSON'),
    Fault('bad-choice', 'bad input',
          'unknown profile, model, device or verb',
          'one-line error listing the valid choices, exit 2'),
    Fault('unknown-figure', 'bad input',
          'unknown figure in `--only`',
          'one-line error listing the valid figure names, exit 2'),
    Fault('cuda-without-cuda', 'bad input',
          '`--device cuda` where CUDA is not available',
          'one-line error suggesting `--device cpu` or `auto`, exit non-zero'),
    Fault('bad-notebook-parameter', 'bad input',
          'a papermill parameter of the wrong type (`-p seed abc`, `-p L 2.5`)',
          "the notebook's first code cell raises a ConfigError naming the parameter, what it must be, and a valid flag"),
    Fault('dataset-missing', 'bad input',
          'a dataset is missing',
          'the error says which files to put where, or to run `make data`; under `reproduce` only the figures that need it are blocked'),
    Fault('dataset-corrupt', 'bad input',
          'a dataset file is corrupt (wrong md5, truncated, wrong shape)',
          'the error names the file, its md5 and the expected one, and says to delete it and run `make data`'),
    Fault('unwritable-output', 'bad input',
          'the output directory is not writable',
          'one-line error naming the path, exit non-zero'),
    Fault('foreign-checkpoint', 'bad input',
          'a checkpoint from another configuration is in the output directory',
          'refused with both config hashes named; nothing is overwritten'),
    Fault('loss-diverges', 'bad input',
          'the loss becomes NaN or explodes during training',
          'training stops with the step and the path of the last good checkpoint (TrainingDiverged)'),
    Fault('zero-variance-layernorm', 'bad input',
          'a zero-variance LayerNorm row (Assumption 2 violated)',
          'the model (eps = 0) and the closed forms raise an error naming the row, instead of returning NaN or inf'),
    Fault('bad-input-after-work', 'bad input',
          'any of the above after earlier work has finished',
          'earlier checkpoints, results and figures are left byte-for-byte intact'),
    Fault('one-figure-fails', 'bad input',
          'one figure fails',
          '`reproduce` goes on with the others, prints the summary table and exits non-zero; the manifest records the error'),
    Fault('notebook-raises', 'notebooks',
          'a notebook raises',
          "`make book` stops with the notebook's name and the error; nbval (`make test`) fails"),
    Fault('offline', 'offline',
          'no network at all',
          'without the data, `data`, `train` and `reproduce` exit within 30 s (about 5 s here) saying which files to put where; with the data on disk, `reproduce` runs with no network'),
    Fault('stale-published', 'results',
          'a result committed under published/ was computed by other settings or other code',
          'it is never used for the current configuration: the paper book stops, naming the result, what differs and the command that refreshes it; reproduce recomputes and reports the difference'),
    Fault('long-run', 'cost',
          'a run would take hours on this device (the CIFAR-100 paper profile on a CPU)',
          'reproduce times a few steps, prints the estimate and skips that result unless --allow-long-runs is given; the other results run and the exit status is 0'),
)
FAULT_IDS = frozenset(f.id for f in FAULTS)
