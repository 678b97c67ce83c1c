#!/usr/bin/env bash
# Review R22's slow procedure (not collected by pytest; several minutes, needs PyPI):
# build the wheel and the sdist, install the wheel into fresh venvs under a scratch folder with
# (a) the newest releases every range of pyproject.toml allows and (b) the LOWEST release of
# every range (uv's --resolution lowest-direct over the ranges themselves), and run a
# representative subset of the suite against each, from a copy of tests/ beside no agentgate/
# (so the installed wheel is what is imported, not the source tree).
#   bash tests/install_matrix.sh [SCRATCH]      (default /tmp/r22-matrix)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="${1:-/tmp/r22-matrix}"
rm -rf "$W" && mkdir -p "$W"
python3 -m venv "$W/tools" && "$W/tools/bin/pip" install -q build uv
(cd "$ROOT" && "$W/tools/bin/python" -m build -q -o "$W/dist" .)   # sdist, then the wheel FROM it
WHEEL="$(ls "$W"/dist/agentgate_middleware-*.whl)"
FAILED=""
# R42: what the two archives hold. The wheel: every module of the sdist's package, py.typed (a
# user's mypy --strict), __main__ (python -m agentgate), the console script, nothing of tests/
# or docs/. The sdist ships tests/test_*.py (setuptools' default), so it must ship what they read,
# or a test run from it (as distributions do) fails: conftest.py, the vectors and corpus,
# policies, examples, docs, benchmarks' calibration data (MANIFEST.in grafts them, and prunes a run's leftovers).
"$W/tools/bin/python" - "$WHEEL" "$(ls "$W"/dist/agentgate_middleware-*.tar.gz)" <<'PY' || FAILED="$FAILED archives"
import sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
names = set(wheel.namelist())
sdist = {n.split("/", 1)[1] for n in tarfile.open(sys.argv[2]).getnames() if "/" in n}
package = {n for n in sdist if n.startswith("agentgate/") and n.endswith((".py", ".typed"))}
bad = [f"wheel lacks {n}" for n in sorted(package - names)]
bad += [f"wheel lacks {n}" for n in ("agentgate/py.typed", "agentgate/__main__.py") if n not in names]
points = wheel.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
if "agentgate = agentgate.cli:run" not in points:
    bad.append("wheel lacks the agentgate console script")
bad += [f"wheel holds {n}" for n in sorted(names) if n.split("/")[0] in ("tests", "docs", "examples", "policies")]
if any(n.startswith("tests/test_") for n in sdist):
    needs = ("tests/conftest.py", "tests/vectors/keys.json", "tests/corpus/", "policies/support.yaml",
             "examples/support_agent.py", "docs/quickstart.md", "benchmarks/calibration/", "Makefile")
    bad += [f"sdist lacks {n}" for n in needs if not any(s.startswith(n) for s in sdist)]
leftovers = (".hypothesis/", ".agentgate/", "__pycache__/")  # what a run leaves in the tree
bad += [f"sdist holds {n}" for n in sorted(sdist) if any(p in n for p in leftovers) or n.endswith((".db", ".key"))]
for line in bad:
    print("== archives:", line)
sys.exit(1 if bad else 0)
PY
"$W/tools/bin/python" - "$ROOT/pyproject.toml" "$W" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
open(f"{sys.argv[2]}/core.in", "w").write("\n".join(project["dependencies"]) + "\n")
lg = project["dependencies"] + project["optional-dependencies"]["langgraph"]
open(f"{sys.argv[2]}/lg.in", "w").write("\n".join(lg) + "\n")
EOF
CORE_TESTS="test_authority_decisions.py test_authority_encoding.py test_authority_grants.py
  test_authority_vectors.py test_policy_load.py test_policy_lint.py test_policy_index.py test_keys.py
  test_audit_log.py test_audit_entry.py test_audit_tamper.py test_store.py test_ledger.py test_gate.py
  test_gate_run.py test_cli_grant.py test_audit_cli.py test_audit_spans.py test_dispatch_dispatcher.py
  test_dispatch_metrics.py test_broker_docs_model.py test_store_fault_injection.py test_authority_stateful.py
  test_packaging_extras.py test_gate_approvals.py"
# The LangGraph subset adds the newer middleware, streaming and gateway files (R41: the matrix ran
# none of dispatch streaming, cut answers, time travel, tracing or the gateway SDK files).
LG_TESTS="$CORE_TESTS test_langgraph.py test_gateway.py test_gateway_hostile.py test_dispatch_usage.py
  test_dispatched_streaming.py test_cut_answers.py test_gateway_sdks.py
  test_langgraph_time_travel.py test_observability_one_trace.py
  test_langgraph_real_agents.py test_langgraph_approvals_and_enforce.py test_langgraph_approvals_checkpointers.py test_langgraph_max_tokens.py
  test_langgraph_resume_after_policy_change.py test_langgraph_stream_charges.py test_langgraph_streaming.py
  test_langgraph_cached_answers.py"
# R42 bisected the langgraph extra's floors with these LangGraph files: test_langgraph_stream_charges.py
# fails at langgraph 1.1.10 (no stream_events), test_langgraph_resume_after_policy_change.py at
# langgraph-checkpoint-sqlite 3.0.2 (aiosqlite 0.22's Connection has no is_alive).
# test_packaging_extras.py runs the quickstart's commands with `python -m agentgate` from the
# installed wheel, the extras made unimportable, in an empty directory.
mkdir -p "$W/t" && cp -r "$ROOT"/{tests,policies,examples,docs,pyproject.toml} "$W/t/"
ln -sfn "$ROOT/../shared" "$W/shared"   # tests read ../shared from the folder above tests/
run() {  # NAME RESOLUTION INPUT TESTS...
  local name=$1 resolution=$2 input=$3; shift 3
  python3 -m venv "$W/$name"
  "$W/tools/bin/uv" pip compile -q --resolution "$resolution" --python-version 3.11 "$W/$input" -o "$W/$name.txt"
  grep -E '^[A-Za-z0-9_.-]+(\[[^]]*\])?==' "$W/$name.txt" > "$W/$name.pins"
  "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" -r "$W/$name.pins" -c "$W/$name.pins" \
    pytest pytest-asyncio pytest-timeout hypothesis 'openai>=1.40,<4'
  if [[ $input == lg.in ]]; then
    "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" -c "$W/$name.pins" 'langchain-openai>=0.3,<2'
  fi
  "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" --no-deps "$WHEEL"
  echo "== $name: $(tr '\n' ' ' < "$W/$name.pins")"
  mkdir -p "$W/empty-$name"   # the console script the wheel installs, run where there is nothing
  (cd "$W/empty-$name" && "$W/$name/bin/agentgate" --help > /dev/null) ||
    { echo "== $name: agentgate --help failed"; FAILED="$FAILED $name-script"; }
  (cd "$W/t" && "$W/$name/bin/python" -m pytest -q -p no:cacheprovider -m "not slow" --timeout 120 \
    $(printf 'tests/%s ' "$@")) || { echo "== $name: FAILURES (see above)"; FAILED="$FAILED $name"; }
}
run low-core lowest-direct core.in $CORE_TESTS
run low-lg lowest-direct lg.in $LG_TESTS
run new-lg highest lg.in $LG_TESTS
if [[ -n $FAILED ]]; then echo "== failed:$FAILED"; exit 1; fi
echo "== all resolutions passed"
