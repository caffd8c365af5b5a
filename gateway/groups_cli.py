"""``gateway groups list | describe GROUP | reset-offsets GROUP --topic T --to-... | delete GROUP``.

Through the admin API of a running gateway with the same config when it answers (so live
members show), otherwise against the configured backends opened directly (committed offsets and
the stored group snapshots).
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from gateway.cli_admin import admin_for, direct
from gateway.config import load_config
from gateway.core.groups import delete_group, describe_group, group_summaries, reset_offsets
from gateway.model import GatewayError


def add_groups_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="list, describe, delete consumer groups; reset offsets")
    gsub = p.add_subparsers(dest="groups_cmd", required=True)

    def common(q: argparse.ArgumentParser) -> argparse.ArgumentParser:
        q.add_argument("--config", default=None, help="config file")
        q.add_argument("--json", action="store_true", help="print JSON")
        q.set_defaults(func=cmd_groups)
        return q

    common(gsub.add_parser("list", help="every known group"))
    d = common(gsub.add_parser("describe", help="members, assignment, committed offsets, lag"))
    d.add_argument("group")
    r = common(gsub.add_parser("reset-offsets", help="commit new offsets for a group"))
    r.add_argument("group")
    r.add_argument("--topic", required=True)
    r.add_argument("--partition", type=int, action="append", default=None, help="repeatable")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-timestamp", type=int, metavar="US", help="microseconds since epoch")
    r.add_argument("--force", action="store_true", help="even while members are active")
    d = common(gsub.add_parser("delete", help="forget an empty group and its offsets"))
    d.add_argument("group")


def _target(args: argparse.Namespace) -> str | int:
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_offset is not None:
        return int(args.to_offset)
    return f"timestamp:{args.to_timestamp}"


def _direct(config: Any, fn: Any) -> Any:
    """``gateway.cli_admin.direct``, with a GatewayError raised as itself (not inside the
    nursery's exception group) so the CLI prints it as an error line."""

    async def guarded(core: Any) -> Any:
        try:
            return await fn(core)
        except GatewayError as exc:
            return exc

    result = direct(config, guarded)
    if isinstance(result, GatewayError):
        raise result
    return result


def _ask(admin: Any, config: Any, request: tuple[Any, ...], direct: Any) -> Any:
    """The answer of the running gateway's admin API to ``request`` (method, path[, body]) when
    one answers, otherwise of ``direct`` run on the configured backends opened here."""
    return admin.request(*request) if admin else _direct(config, direct)


def cmd_groups(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    admin = admin_for(config)
    cmd = args.groups_cmd
    if cmd == "list":
        data = _ask(admin, config, ("GET", "/v1/groups"), group_summaries)
        if args.json:
            print(json.dumps(data, indent=2))
        for g in [] if args.json else data:
            print(
                f"{g['name']}\t{g['state']}\tgeneration={g['generation']}\tmembers={g['members']}"
            )
        return 0
    path = f"/v1/groups/{quote(args.group, safe='')}"
    if cmd == "describe":
        data = _ask(admin, config, ("GET", path), lambda core: describe_group(core, args.group))
        if args.json:
            print(json.dumps(data, indent=2))
            return 0
        print(
            f"group {data['group']}: {data['state']}, generation {data['generation']}, "
            f"{data['protocol']} assignment ({data['source']})"
        )
        for m in data["members"]:
            parts = " ".join(f"{t}/{p}" for t, p in m["assignment"]) or "-"
            print(f"  member {m['member_id']}: {parts}")
        print("TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tMETADATA")
        for o in data["offsets"]:
            print(
                f"{o['topic']}\t{o['partition']}\t{o['committed']}\t"
                f"{o.get('high_watermark', '?')}\t{o.get('lag', '?')}\t{o['metadata']}"
            )
        return 0
    if cmd == "delete":
        data = _ask(admin, config, ("DELETE", path), lambda core: delete_group(core, args.group))
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            print(f"deleted group {args.group} ({data['offsets_deleted']} committed offset(s))")
        return 0
    to, parts, force = _target(args), args.partition, args.force
    body = {"topic": args.topic, "to": to, "partitions": parts, "force": force}
    data = _ask(
        admin,
        config,
        ("POST", f"{path}/reset-offsets", body),
        lambda core: reset_offsets(core, args.group, args.topic, to, parts, force),
    )
    if args.json:
        print(json.dumps(data, indent=2))
    for row in [] if args.json else data:
        print(f"{args.group}\t{row['topic']}\t{row['partition']}\t{row['committed']}")
    return 0
