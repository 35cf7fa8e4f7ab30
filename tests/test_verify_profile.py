"""``curvature-gap verify --profile`` (tracker issue 21, item 4): the profile whose results the trained
model's rows read is an argument (default "paper", as before), threaded from the CLI to the Context."""
from __future__ import annotations

import pytest

from curvature_gap import checks
from curvature_gap.cli import build_parser, main
from curvature_gap.config import PROFILES


def test_parser_default_and_choices():
    p = build_parser()
    assert p.parse_args(["verify"]).profile == "paper"
    for prof in PROFILES:
        assert p.parse_args(["verify", "--profile", prof]).profile == prof
    with pytest.raises(SystemExit):
        p.parse_args(["verify", "--profile", "nonesuch"])


@pytest.mark.parametrize("argv,want", [(["verify"], "paper"), (["verify", "--profile", "smoke"], "smoke")])
def test_cli_threads_the_profile(monkeypatch, argv, want):
    seen = {}
    monkeypatch.setattr(checks, "main", lambda *a, **k: seen.setdefault(k.get("verdicts"), k.get("profile")) and 0)
    assert main(argv) == 0
    assert main(argv + ["--findings"]) == 0
    assert seen == {False: want, True: want}


class _Stop(Exception):
    pass


def test_run_and_main_build_the_context_of_the_profile(monkeypatch):
    profiles = []

    def spy_context(**kw):
        profiles.append(kw["profile"])
        raise _Stop

    monkeypatch.setattr(checks, "Context", spy_context)
    for call in (lambda: checks.run(True), lambda: checks.run(True, profile="smoke"),
                 lambda: checks.main(None, True), lambda: checks.main(None, True, profile="smoke")):
        with pytest.raises(_Stop):
            call()
    assert profiles == ["paper", "smoke", "paper", "smoke"]


def test_rows_meta_reads_the_profile(monkeypatch):
    seen = []
    monkeypatch.setattr(checks, "verify_code_hash", lambda: "c" * 16)
    monkeypatch.setattr(checks, "config_hash_of", lambda name, ctx: seen.append(ctx.profile) or f"{ctx.profile}:{name}")
    paper = checks.rows_meta(True)
    assert paper == checks.rows_meta(True, profile="paper")
    assert set(seen) == {"paper"} and paper["results"]["fig3"] == "paper:fig3"
    smoke = checks.rows_meta(True, profile="smoke")
    assert smoke["results"]["fig3"] == "smoke:fig3" and smoke["code"] == paper["code"]


@pytest.mark.slow
def test_a_result_absent_from_the_profile_is_not_looked_up(monkeypatch):
    """fig6_mnist exists only under "paper": under "smoke" its hash is None and it is never looked up
    (``find_result`` would raise ConfigError), so its rows are ``not run``."""
    assert checks.rows_meta(True, profile="smoke")["results"]["fig6_mnist"] is None
    assert checks.rows_meta(True)["results"]["fig6_mnist"] is not None
    looked_up = []
    monkeypatch.setattr(checks, "find_result", lambda name, ctx: looked_up.append(name))

    class _Stop(Exception):
        pass

    def stop(*a, **k):
        raise _Stop

    monkeypatch.setattr(checks, "TOPICS", (checks.Topic("stop", stop), *checks.TOPICS))
    with pytest.raises(_Stop):
        checks.run(True, profile="smoke")
    assert "fig6_mnist" not in looked_up and "fig3" in looked_up
    looked_up.clear()
    with pytest.raises(_Stop):
        checks.run(True)
    assert looked_up == list(checks.DATA_RESULTS)
