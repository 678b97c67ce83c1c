"""The parser of ``agentgate policy``, apart from its handlers (agentgate/cli/policy.py), which
need the policy package (its pydantic schema, the YAML loader, the linter): ``agentgate --help``
and ``agentgate policy ... --help`` build this parser without loading it (review R65)."""

from __future__ import annotations

from typing import Any

from agentgate.cli._common import given, given_file, given_utf8, text
from agentgate.cli._handlers import handled_by

_POLICY = "agentgate.cli.policy"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("policy", help="lint and explain YAML policies; print their JSON Schema")
    sub = parser.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    sub.required = True

    p_lint = sub.add_parser("lint", help="find the four failure states in a policy file")
    p_lint.add_argument("file", type=given, metavar="FILE", help="the policy YAML file")
    p_lint.add_argument("--json", action="store_true", help="print findings as JSON")
    p_lint.set_defaults(handler=handled_by(_POLICY, "_lint"))

    p_explain = sub.add_parser("explain", help="say whether a call is allowed and why")
    p_explain.add_argument("file", type=given, metavar="FILE", help="the policy YAML file")
    p_explain.add_argument(
        "--as",
        dest="principal",
        required=True,
        type=given_utf8,  # only compared: not UTF-8 is exit 2, not a DENY verdict (review R88d)
        metavar="PRINCIPAL",
        help="principal name or did:key",
    )
    p_explain.add_argument(
        "--tool", required=True, type=given_utf8, metavar="NAME", help="tool name, e.g. payments.refund"
    )
    p_explain.add_argument(
        "--args", default="{}", type=text, metavar="JSON", help="call arguments as a JSON object"
    )
    p_explain.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    p_explain.set_defaults(handler=handled_by(_POLICY, "_explain"))

    p_schema = sub.add_parser("schema", help="print the policy JSON Schema")
    p_schema.add_argument(
        "--out",
        "--output",  # the spelling until review R69, kept for the scripts that use it
        "-o",
        dest="out",
        type=given_file,
        metavar="FILE",
        help="write to this file instead of stdout",
    )
    p_schema.set_defaults(handler=handled_by(_POLICY, "_schema"))
