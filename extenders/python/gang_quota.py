#!/usr/bin/env python3
"""gang-quota: a berth remote extender in Python at the group points.

berthd (``--feature-gates=GenericWorkload=true``) schedules the pods of a
``scheduling.k8s.io/v1beta1`` PodGroup together, in a group cycle. This
extender serves two of the group points of berth.extender.v1, written from
``proto/berth/extender/v1/extender.proto`` with nothing but grpcio:

* **GroupPermit**: once the cycle placed the whole gang, the gang goes on
  only if the CPU its placed pods request (containers' ``resources.requests
  .cpu``, summed) stays within ``--max-gang-cpu`` (per namespace with
  ``NS=CPU``, or for all); otherwise every pod of the gang stays unbound,
  with the reason ``pod group NS/NAME requests 12 CPUs, over the 8 CPUs a
  gang may take in namespace NS``. Sizing a gang is a decision about the
  whole gang: no per-pod Permit can make it.
* **PodGroupPostFilter**: when a gang does not fit, says why the extender
  cannot help (it evicts nothing), naming the pods that did not fit and the
  first one's message; berthd appends it to the gang's message.

Run: ``python gang_quota.py --listen 127.0.0.1:7071 --max-gang-cpu 8``. The
first line on stderr is ``listening on HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import protogen

EXTENDER_NAME = "gang-quota"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

log = logging.getLogger(EXTENDER_NAME)


# ---------------------------------------------------------------------------
# The logic, on plain values.


def parse_cpu(text: str) -> Decimal:
    """A CPU quantity (``2``, ``1.5``, ``500m``) in CPUs; ValueError if not one."""
    t = text.strip()
    try:
        if t.endswith("m"):
            return Decimal(t[:-1]) / 1000
        return Decimal(t)
    except InvalidOperation as e:
        raise ValueError(f"{text!r} is not a CPU quantity") from e


def pod_cpu(pod: Mapping[str, Any]) -> Decimal:
    """The CPU a pod's containers request, summed."""
    spec = pod.get("spec") or {}
    total = Decimal(0)
    for c in spec.get("containers") or []:
        cpu = ((c.get("resources") or {}).get("requests") or {}).get("cpu")
        if cpu is not None:
            total += parse_cpu(str(cpu))
    return total


def cpus(v: Decimal) -> str:
    """``12`` or ``1.5``, as people write CPUs."""
    return format(v.normalize(), "f")


@dataclass(frozen=True)
class Limits:
    """The most CPU a gang may take: per namespace, else for all."""

    default: Decimal | None = None
    by_namespace: Mapping[str, Decimal] = field(default_factory=dict)

    def of(self, namespace: str) -> Decimal | None:
        return self.by_namespace.get(namespace, self.default)


def parse_limits(values: Iterable[str]) -> Limits:
    """``8`` (every namespace) or ``NS=8``, possibly comma-separated."""
    default = None
    by_ns: dict[str, Decimal] = {}
    for v in values:
        for part in filter(None, (p.strip() for p in v.split(","))):
            ns, sep, cpu = part.rpartition("=")
            if sep and not ns:
                raise ValueError(f"{part!r} has no namespace before '='")
            limit = parse_cpu(cpu)
            if sep:
                by_ns[ns] = limit
            else:
                default = limit
    return Limits(default, by_ns)


def gang_verdict(
    namespace: str, name: str, placed_pods: list[Mapping[str, Any]], limits: Limits
) -> tuple[bool, str]:
    """Whether the placed gang may go on, and why not."""
    limit = limits.of(namespace)
    if limit is None:
        return True, ""
    asked = sum((pod_cpu(p) for p in placed_pods), Decimal(0))
    if asked <= limit:
        return True, ""
    return False, (
        f"pod group {namespace}/{name} requests {cpus(asked)} CPUs, "
        f"over the {cpus(limit)} CPUs a gang may take in namespace {namespace}"
    )


# ---------------------------------------------------------------------------
# The protocol: one Session per stream.


class RequestError(Exception):
    """A request that cannot be answered; it is answered with an Error."""


@dataclass
class Group:
    """A group cycle's group, as its GroupCycleStart sent it."""

    namespace: str
    name: str
    #: The pods to place, parsed, by uid.
    pods: dict[str, Mapping[str, Any]]


@dataclass
class Session:
    """The extender's side of one stream: messages in, answers out."""

    pb: Any
    limits: Limits
    groups: dict[int, Group] = field(default_factory=dict)
    opened: bool = False

    def hello(self) -> Any:
        pb = self.pb
        return pb.ExtenderMessage(
            hello=pb.Hello(
                name=EXTENDER_NAME,
                protocol_version=pb.PROTOCOL_VERSION_2,
                points=[pb.EXTENSION_POINT_GROUP_PERMIT, pb.EXTENSION_POINT_POD_GROUP_POST_FILTER],
            )
        )

    def handle(self, message: Any) -> list[Any]:
        kind = message.WhichOneof("message")
        if kind == "open":
            self.opened = True
            log.info("session opened scheduler=%s", message.open.scheduler)
            return [self.hello()]
        if kind == "group_cycle_start":
            g = message.group_cycle_start
            pods = {}
            for m in g.pods:
                try:
                    pods[m.uid] = json.loads(m.pod)
                except ValueError:
                    log.warning("pod %s/%s was sent as invalid JSON", m.namespace, m.name)
                    pods[m.uid] = {}
            self.groups[g.cycle_id] = Group(g.namespace, g.name, pods)
            log.info("group cycle started cycle=%d group=%s/%s pods=%d", g.cycle_id, g.namespace, g.name, len(pods))
        elif kind == "cycle_end":
            self.groups.pop(message.cycle_end.cycle_id, None)
        elif kind == "request":
            return [self.pb.ExtenderMessage(response=self._answer(message.request))]
        # Nodes, NodesSynced, Cancel: nothing to keep (answers are at once).
        return []

    def _answer(self, request: Any) -> Any:
        pb = self.pb
        try:
            return pb.Response(id=request.id, **self._result(request))
        except RequestError as e:
            log.warning("request failed id=%d: %s", request.id, e)
            return pb.Response(id=request.id, error=pb.Error(message=str(e)))
        except Exception as e:  # a bug here must not end the session
            log.exception("request failed id=%d", request.id)
            return pb.Response(id=request.id, error=pb.Error(message=f"{EXTENDER_NAME}: internal error: {e!r}"))

    def _result(self, request: Any) -> dict[str, Any]:
        pb = self.pb
        kind = request.WhichOneof("kind")
        group = self.groups.get(request.cycle_id)
        if group is None:
            raise RequestError(f"unknown group cycle {request.cycle_id} (no GroupCycleStart for it)")
        if kind == "group_permit":
            placed = [group.pods.get(p.uid, {}) for p in request.group_permit.placement]
            try:
                ok, why = gang_verdict(group.namespace, group.name, placed, self.limits)
            except ValueError as e:
                raise RequestError(str(e)) from e
            # A what-if (berthd's DryRun, Simulate) is answered the same;
            # this extender keeps no state to leave untouched.
            log.info(
                "group permit group=%s/%s pods=%d allowed=%s dry_run=%s",
                group.namespace,
                group.name,
                len(placed),
                ok,
                request.group_permit.dry_run,
            )
            status = pb.Status(code=pb.CODE_SUCCESS) if ok else pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=[why])
            return {"group_permit": pb.GroupPermitResponse(status=status)}
        if kind == "pod_group_post_filter":
            r = request.pod_group_post_filter
            unplaced = [a for a in r.pods if not a.node]
            why = f"{EXTENDER_NAME} evicts nothing"
            if unplaced:
                why += f" ({len(unplaced)} pod(s) did not fit: {unplaced[0].message})"
            log.info("pod group post filter group=%s/%s dry_run=%s", group.namespace, group.name, r.dry_run)
            return {
                "pod_group_post_filter": pb.PodGroupPostFilterResponse(
                    status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=[why])
                )
            }
        raise RequestError(f"{EXTENDER_NAME} serves GroupPermit and PodGroupPostFilter only, not {kind}")


class ExtenderService:
    """The Extender gRPC service: a fresh Session per stream."""

    def __init__(self, pb: Any, limits: Limits) -> None:
        self.pb = pb
        self.limits = limits

    async def Session(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:  # noqa: N802
        session = Session(self.pb, self.limits)
        try:
            async for message in requests:
                for answer in session.handle(message):
                    yield answer
        finally:
            log.info("session closed")


# ---------------------------------------------------------------------------
# The process.


async def serve(listen: str, protocol: protogen.Protocol, limits: Limits) -> None:
    import grpc  # noqa: PLC0415

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
    )
    protocol.pb2_grpc.add_ExtenderServicer_to_server(ExtenderService(protocol.pb2, limits), server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    host, _, _ = listen.rpartition(":")
    print(f"listening on {host}:{port}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: a free port)")
    p.add_argument(
        "--max-gang-cpu",
        action="append",
        default=[],
        help="the most CPU a gang may request: CPU for every namespace, or NS=CPU (repeatable)",
    )
    p.add_argument("--proto-dir", type=Path, default=protogen.DEFAULT_PROTO_DIR)
    p.add_argument("--gen-dir", type=Path, default=protogen.DEFAULT_CACHE_DIR)
    args = p.parse_args(None if argv is None else list(argv))
    try:
        limits = parse_limits(args.max_gang_cpu)
    except ValueError as e:
        print(f"{EXTENDER_NAME}: --max-gang-cpu: {e}", file=sys.stderr)
        return 2
    try:
        protocol = protogen.load(args.proto_dir, args.gen_dir)
    except protogen.CodegenError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args.listen, protocol, limits))
    except OSError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
