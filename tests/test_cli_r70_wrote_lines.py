"""Every verb that writes its output to `--out` says where on standard output, which carries
nothing else in that mode (docs/cli.md, Conventions, Files): the `audit` verbs and `policy
schema --out` did; `grant issue`, `grant delegate` and `approval sign` said it on standard error,
so a script reading one stream for "what was written" saw half of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_cli_grant import cli, env
from test_cli_scripts import CLI, _env, work

__all__ = ["env", "work"]  # fixtures: keys under k/ and a store (env); keys, a token, a logged store (work)

ISSUE = (
    "grant",
    "issue",
    "--issuer",
    "k/root.key",
    "--to",
    "k/alice.pub",
    "--allow",
    "tool:x",
    "--ttl",
    "1h",
)


def _written(capsys: pytest.CaptureFixture[str], *argv: str, out_file: str) -> tuple[str, str]:
    code, out, err = cli(capsys, *argv, "--out", out_file)
    assert code == 0 and Path(out_file).is_file(), err
    return out, err


def test_grant_issue_and_delegate_say_what_they_wrote_on_stdout(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: `grant issue --out a.tok` printed `wrote a.tok (grant ID)` on standard error."""
    out, err = _written(capsys, *ISSUE, out_file="a.tok")
    assert out.startswith("wrote a.tok (grant ") and out.count("\n") == 1 and err == "", (out, err)
    out, err = _written(capsys, "grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
                        "--allow", "tool:x", "--ttl", "10m", out_file="b.tok")  # fmt: skip
    assert out.startswith("wrote b.tok (grant ") and out.count("\n") == 1 and err == "", (out, err)


@pytest.mark.usefixtures("no_default_store")
def test_approval_sign_says_what_it_wrote_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: `approval sign --out` said `approval written to FILE` on standard error; what
    the request asks stays there, as without `--out`, where standard output is the approval."""
    from test_cli_approval_hostile import request

    from agentgate.keys import SigningKey, save_key

    key, _ = save_key(SigningKey.generate(), tmp_path / "k", "approver")
    payload = tmp_path / "payload.json"
    payload.write_text(request())
    out_file = str(tmp_path / "approval.json")
    out, err = _written(capsys, "approval", "sign", str(payload), "--as", str(key), out_file=out_file)
    assert out == f"approval written to {out_file}: resume the run with it\n", (out, err)
    assert "written" not in err and "approver" in err, err


def test_every_writer_says_it_on_the_same_stream(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit verbs and `policy schema` say it on standard output too (they did before R70;
    `audit checkpoint --out` prints the checkpoint itself there, its data, and no such line)."""
    _written(capsys, *ISSUE, out_file="a.tok")
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0  # an entry in the log, to prove
    assert cli(capsys, "audit", "checkpoint")[0] == 0
    for argv, out_file in [
        (("audit", "report"), "report.html"),
        (("audit", "prove", "0"), "proof.json"),
        (("policy", "schema"), "schema.json"),
    ]:
        out, err = _written(capsys, *argv, out_file=out_file)
        assert out.startswith("wrote ") and out_file in out and out.count("\n") == 1 and err == "", (
            argv,
            out,
            err,
        )


def test_a_closed_stdout_does_not_fail_a_write_that_is_done(work: Path) -> None:
    """Review R70: the line saying where the file went is said once the file is in place; a
    standard output closed by a cron line (`>&-`) drops it and the command keeps its exit code
    (a `grant issue --out` retried after a false exit 2 issues a second grant). Before R70 the
    audit verbs and `policy schema` exited 2 there, `cannot write the output`, their file written."""
    script = (
        'exec 3>&2; "$@" grant issue --issuer root.key --to agent.pub --allow tool:x --ttl 1m --out o.tok >&-; '
        'echo "issue=$?" >&3; "$@" audit report --out r.html >&-; echo "report=$?" >&3; '
        '"$@" policy schema --out s.json >&-; echo "schema=$?" >&3'
    )
    done = subprocess.run(
        ["bash", "-c", script, "_", *CLI], capture_output=True, text=True, cwd=work, env=_env(), timeout=120
    )
    assert done.stderr.split() == ["issue=0", "report=0", "schema=0"], done.stderr
    assert all((work / name).stat().st_size > 0 for name in ("o.tok", "r.html", "s.json"))
