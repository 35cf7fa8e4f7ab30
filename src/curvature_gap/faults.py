"""The fault cases users of this companion hit, what the program does in each, and the tests that prove it.

This list is the single source of truth for three things: the table in the book's reproducibility
chapter, the ``reliability`` pytest marker (``tests/conftest.py`` marks every test named here, so
``pytest -m reliability`` runs exactly this table), and a test that fails when a named test no longer
exists.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    area: str
    case: str  # what goes wrong
    behaviour: str  # what the program does about it
    tests: tuple[str, ...]  # pytest node ids (a function name covers all its parameters)


_TR, _EX, _RP = "tests/test_train.py", "tests/test_experiments.py", "tests/test_reproduce.py"
_REL = "tests/reliability"

FAULTS: tuple[Fault, ...] = (
    # ------------------------------------------------------------------ determinism
    Fault("determinism", "the same command is run twice with the same seed",
          "bit-identical checkpoints (sha256 of the weights) and identical result arrays; another seed gives other weights",
          (f"{_TR}::test_same_seed_same_weights_other_seed_differs",
           f"{_REL}/test_reproduce_faults.py::test_same_command_gives_identical_checkpoints_and_results")),
    # ------------------------------------------------------------------ interruption
    Fault("interruption", "training is killed (SIGKILL) at a random step",
          "the rerun resumes from the last checkpoint (weights, optimiser, RNG, data order) and ends bit-identical to an uninterrupted run",
          (f"{_REL}/test_training_faults.py::test_sigkill_at_random_step_then_resume_equals_uninterrupted",
           f"{_TR}::test_interrupted_run_resumes_to_identical_weights")),
    Fault("interruption", "`curvature-gap reproduce` is killed (SIGKILL) half-way",
          "the rerun reuses every finished figure's numbers, recomputes only the missing ones, and ends with the same numbers as an uninterrupted run",
          (f"{_REL}/test_reproduce_faults.py::test_sigkill_mid_reproduce_then_rerun_recomputes_only_what_is_missing",
           f"{_RP}::test_all_ok_exits_zero_and_a_restart_recomputes_only_what_is_missing",
           f"{_EX}::test_interrupted_trajectory_resumes_from_its_saved_snapshots")),
    Fault("interruption", "a process dies while writing a file",
          "every checkpoint, result and manifest is written to a temporary file and renamed into place, so a reader sees the old file or the new one, never half of one",
          (f"{_REL}/test_reproduce_faults.py::test_sigkill_mid_reproduce_then_rerun_recomputes_only_what_is_missing",
           f"{_REL}/test_bad_input.py::test_atomic_write_keeps_the_old_file_when_writing_fails")),
    # ------------------------------------------------------------------ caches
    Fault("caches", "a cached result file is truncated, edited or deleted",
          "detected by its recorded sha256 and size; a StaleResultWarning names the file, and the numbers are recomputed",
          (f"{_EX}::test_damaged_result_is_detected_and_recomputed",)),
    Fault("caches", "a cached checkpoint is truncated",
          "detected (it fails to load or its hash differs); a warning names it and the model is retrained to the same weights",
          (f"{_EX}::test_damaged_checkpoint_is_detected_and_retrained_to_the_same_weights",)),
    Fault("caches", "a setting changes (profile, seed, learning rate, figure settings)",
          "the config hash changes, so old numbers and checkpoints are never reused; they stay on disk under their own hash",
          (f"{_EX}::test_config_change_never_reuses_old_numbers", f"{_EX}::test_result_store_roundtrip_and_config_mismatch")),
    Fault("caches", "re-plotting a figure",
          "reads the stored numbers only; nothing is recomputed",
          (f"{_EX}::test_plot_reads_results_and_never_recomputes", f"{_EX}::test_cached_figure_is_reused_without_its_inputs")),
    Fault("caches", "`make clean`",
          "removes results/, runs/, _build/ and bytecode caches; never the datasets",
          (f"{_REL}/test_bad_input.py::test_make_clean_removes_caches_and_keeps_data",)),
    # ------------------------------------------------------------------ concurrency
    Fault("concurrency", "two `reproduce` runs at once on the same results directory",
          "a file lock per training run and per result: the second waits (and says so), then reuses what the first wrote; the manifest stays valid JSON",
          (f"{_REL}/test_reproduce_faults.py::test_two_concurrent_reproduce_runs_train_once_and_agree",
           f"{_RP}::test_two_concurrent_runs_compute_once_and_keep_the_manifest_valid")),
    # ------------------------------------------------------------------ bad input
    Fault("bad input", "unknown profile, model, device or verb",
          "one-line error listing the valid choices, exit 2",
          ("tests/test_cli.py::test_bad_choice_is_one_line_exit_2",)),
    Fault("bad input", "unknown figure in `--only`",
          "one-line error listing the valid figure names, exit 2",
          (f"{_RP}::test_unknown_figure_is_one_line_and_exit_code_2",)),
    Fault("bad input", "`--device cuda` where CUDA is not available",
          "one-line error suggesting `--device cpu` or `auto`, exit non-zero",
          ("tests/test_cli.py::test_cuda_requested_without_cuda_is_clear",)),
    Fault("bad input", "a papermill parameter of the wrong type (`-p seed abc`, `-p L 2.5`)",
          "the notebook's first code cell raises a ConfigError naming the parameter, what it must be, and a valid flag",
          (f"{_REL}/test_bad_input.py::test_papermill_parameter_of_the_wrong_type_stops_the_notebook",
           f"{_REL}/test_bad_input.py::test_check_parameters_names_the_parameter_and_the_fix")),
    Fault("bad input", "a dataset is missing",
          "the error says which files to put where, or to run `make data`; under `reproduce` only the figures that need it are blocked",
          ("tests/test_data.py::test_missing_mnist_offline_says_what_to_put_where",
           "tests/test_data.py::test_missing_cifar100_offline_says_what_to_put_where",
           "tests/test_cli.py::test_missing_dataset_fails_fast_with_instructions",
           f"{_RP}::test_missing_cifar100_blocks_fig6_with_the_instructions")),
    Fault("bad input", "a dataset file is corrupt (wrong md5, truncated, wrong shape)",
          "the error names the file, its md5 and the expected one, and says to delete it and run `make data`",
          ("tests/test_data.py::test_mnist_wrong_md5_names_the_file_and_the_fix",
           "tests/test_data.py::test_cifar100_wrong_md5_is_a_clear_error",
           "tests/test_data.py::test_truncated_cifar_file_is_a_clear_error",
           f"{_REL}/test_bad_input.py::test_cifar100_images_of_the_wrong_shape_are_refused")),
    Fault("bad input", "the output directory is not writable",
          "one-line error naming the path, exit non-zero",
          ("tests/test_cli.py::test_unwritable_output_directory_is_clear",)),
    Fault("bad input", "a checkpoint from another configuration is in the output directory",
          "refused with both config hashes named; nothing is overwritten",
          (f"{_TR}::test_checkpoint_of_another_config_is_refused",)),
    Fault("bad input", "the loss becomes NaN or explodes during training",
          "training stops with the step and the path of the last good checkpoint (TrainingDiverged)",
          (f"{_TR}::test_nan_loss_stops_with_step_and_last_checkpoint",)),
    Fault("bad input", "a zero-variance LayerNorm row (Assumption 2 violated)",
          "the model (eps = 0) and the closed forms raise an error naming the row, instead of returning NaN or inf",
          ("tests/test_model.py::test_zero_variance_row_raises_with_eps_zero",
           "tests/theory/test_theory_layernorm.py::test_zero_variance_row_raises_clear_error",
           "tests/theory/test_theory_layernorm.py::test_zero_variance_in_block_raises_not_nan")),
    Fault("bad input", "any of the above after earlier work has finished",
          "earlier checkpoints, results and figures are left byte-for-byte intact",
          (f"{_REL}/test_bad_input.py::test_bad_input_leaves_earlier_results_intact",)),
    Fault("bad input", "one figure fails",
          "`reproduce` goes on with the others, prints the summary table and exits non-zero; the manifest records the error",
          (f"{_RP}::test_keeps_going_past_failures_and_exits_non_zero",
           f"{_RP}::test_a_failed_rerun_says_where_the_files_on_disk_come_from")),
    # ------------------------------------------------------------------ notebooks
    Fault("notebooks", "a notebook raises",
          "`make book` stops with the notebook's name and the error; nbval (`make test`) fails",
          ("tests/test_book.py::test_execute_notebook_raises_on_an_error",
           "tests/test_book.py::test_pipeline_exits_nonzero_on_a_broken_notebook_and_zero_on_a_good_one",
           "tests/test_book.py::test_nbval_fails_on_a_broken_notebook_and_on_a_changed_checked_output")),
    # ------------------------------------------------------------------ offline
    Fault("offline", "no network at all",
          "without the data, `data`, `train` and `reproduce` exit within 30 s (about 5 s here) saying which files to put where; with the data on disk, `reproduce` runs with no network",
          (f"{_REL}/test_offline.py::test_without_network_each_command_fails_fast_with_instructions",
           f"{_REL}/test_offline.py::test_without_network_reproduce_works_from_local_data")),
)


def named_tests() -> list[str]:
    """Every test node id named in :data:`FAULTS`, in order, without repeats."""
    seen: dict[str, None] = {}
    for f in FAULTS:
        for t in f.tests:
            seen.setdefault(t, None)
    return list(seen)
