#!/usr/bin/env python3
"""license-slots: a berth remote extender in Python whose Filter depends on
the pods on a node, and so takes part in preemption's what-if.

A node offers ``example.com/license-slots: N`` license slots (its label;
none without it). A pod annotated ``example.com/license`` takes one. The
Filter passes a pod needing a license only on a node with a free slot:
fewer pods needing one on it than its slots, counted from berthd's pod
feed (``wants_pods``: ``PodUpsert``/``PodDelete``). Any other node is
rejected, resolvable (``CODE_UNSCHEDULABLE``, ``node(s) had no free
license slot``): evicting a pod that holds a slot frees it.

**Preemption's what-if** (``PreemptionFilterRequest``; Hello declares
``preemption_filter``): for each candidate node berthd lists the pods it
may evict there, the most important first, and marks its own victims. The
extender judges the node with its pod table less those pods:

1. with every listed pod gone: no free slot rejects the candidate;
2. with the victims gone: a free slot keeps berthd's victims;
3. otherwise it gives the listed pods back one by one, in the order listed,
   keeping each back while a slot stays free (as kube-scheduler reprieves
   victims), and answers the pods that must go (``needed``).

It reuses label_tier.py's session machinery (the node cache, the pod
table, the cycles' pods): only the logic and the answers are its own.

Run: ``python license_slots.py --listen 127.0.0.1:7072``. The first line on
stderr is ``listening on HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import label_tier
import protogen
from label_tier import PlacedPod, RequestError, annotations_of

EXTENDER_NAME = "license-slots"
#: The node label offering license slots.
SLOTS_LABEL = "example.com/license-slots"
#: The pod annotation asking for a license.
LICENSE_ANNOTATION = "example.com/license"
#: Why a node is rejected.
NO_SLOT = "node(s) had no free license slot"

log = logging.getLogger(EXTENDER_NAME)


# ---------------------------------------------------------------------------
# The logic, on plain values.


def needs_license(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod asks for a license."""
    return pod is not None and LICENSE_ANNOTATION in annotations_of(pod)


def slots(labels: Mapping[str, str]) -> int:
    """The license slots a node offers (0 without a valid label)."""
    try:
        return max(0, int(labels.get(SLOTS_LABEL, "0")))
    except ValueError:
        return 0


def has_free_slot(pod_uid: str, labels: Mapping[str, str], pods: Iterable[PlacedPod]) -> bool:
    """Whether a node with ``labels`` running ``pods`` has a slot for another
    pod (the pod itself, if already counted there, aside)."""
    used = sum(1 for p in pods if p.uid != pod_uid and needs_license(p.obj))
    return used < slots(labels)


@dataclass(frozen=True)
class Listed:
    """A pod preemption may evict, as the request lists it."""

    id: int
    uid: str
    victim: bool


@dataclass(frozen=True)
class Verdict:
    """The what-if's verdict on a candidate: ``rejected`` (no slot even with
    every listed pod gone), or ``needed`` (the uids that must go; None when
    the victims do)."""

    rejected: bool = False
    needed: tuple[str, ...] | None = None


def judge(pod_uid: str, labels: Mapping[str, str], on_node: Sequence[PlacedPod], listed: Sequence[Listed]) -> Verdict:
    """The what-if for one candidate node (see the module doc)."""

    def fits(gone: set[int]) -> bool:
        return has_free_slot(pod_uid, labels, (p for p in on_node if p.id not in gone))

    if not fits({p.id for p in listed}):
        return Verdict(rejected=True)
    if fits({p.id for p in listed if p.victim}):
        return Verdict()
    gone = {p.id for p in listed}
    for p in listed:
        gone.discard(p.id)
        if not fits(gone):
            gone.add(p.id)
    return Verdict(needed=tuple(p.uid for p in listed if p.id in gone))


# ---------------------------------------------------------------------------
# The protocol: label_tier's session, with this Filter.


@dataclass
class Session(label_tier.Session):
    """A Session stream of this extender (see label_tier.Session)."""

    name: str = EXTENDER_NAME
    wants_pods: bool = True

    def hello(self) -> Any:
        pb = self.pb
        hello = pb.Hello(
            name=self.name,
            protocol_version=pb.PROTOCOL_VERSION_2,
            points=[pb.EXTENSION_POINT_FILTER],
            wants_nodes=True,
            wants_pods=True,
        )
        if label_tier.knows_preemption_filter(pb):
            hello.preemption_filter = True
        return pb.ExtenderMessage(hello=hello)

    def _result(self, request: Any) -> dict[str, Any]:
        pb = self.pb
        kind = request.WhichOneof("kind")
        if kind not in ("filter", "preemption_filter"):
            raise RequestError(f"{self.name} serves Filter only, not {kind or 'a request without a kind'}")
        if not self.synced:
            raise RequestError("a request before NodesSynced")
        pod = self.cycles.get(request.cycle_id)
        if pod is None:
            raise RequestError(f"unknown cycle {request.cycle_id} (no CycleStart for it on this stream)")
        if pod.obj is None:
            raise RequestError(pod.error or "invalid pod")
        needs = needs_license(pod.obj)
        if kind == "filter":
            rejected = []
            for node_id in request.filter.node_ids:
                node = self.nodes.name_of(node_id)
                if needs and not has_free_slot(pod.uid, self.nodes.labels(node), self.pods.on_node(node)):
                    rejected.append(pb.NodeStatus(node_id=node_id, code=pb.CODE_UNSCHEDULABLE, reasons=[NO_SLOT]))
            log.info("filter pod=%s nodes=%d rejected=%d", pod.key, len(request.filter.node_ids), len(rejected))
            return {"filter": pb.FilterResponse(rejected=rejected)}
        answer = pb.PreemptionFilterResponse()
        for c in request.preemption_filter.candidates:
            if not needs:
                continue
            node = self.nodes.name_of(c.node_id)
            listed = [Listed(p.id, p.uid, p.victim) for p in c.pods]
            v = judge(pod.uid, self.nodes.labels(node), self.pods.on_node(node), listed)
            if v.rejected:
                answer.rejected.append(pb.NodeStatus(node_id=c.node_id, code=pb.CODE_UNSCHEDULABLE, reasons=[NO_SLOT]))
            elif v.needed is not None:
                answer.needed.append(
                    pb.NeededEvictions(
                        node_id=c.node_id, uids=list(v.needed), reasons=["the victims hold no license slot"]
                    )
                )
            log.info(
                "preemption_filter pod=%s node=%s pods=%d verdict=%s",
                pod.key,
                node,
                len(listed),
                "rejected" if v.rejected else ("victims" if v.needed is None else "needs " + ",".join(v.needed)),
            )
        return {"preemption_filter": answer}


class ExtenderService(label_tier.ExtenderService):
    """The Extender gRPC service: a fresh Session per stream."""

    async def Session(self, requests: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        import grpc  # noqa: PLC0415

        session = Session(self.pb, self.name)
        try:
            async for message in requests:
                try:
                    answers = session.handle(message)
                except label_tier.ProtocolError as e:
                    log.warning("protocol error: %s", e)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                    return
                for answer in answers:
                    yield answer
        finally:
            log.info("session closed cycles_open=%d", len(session.cycles))


# ---------------------------------------------------------------------------
# The process.


async def serve(listen: str, protocol: protogen.Protocol, name: str, ready: Callable[[str], None]) -> None:
    """Serves on ``listen`` until SIGTERM or SIGINT."""
    import grpc  # noqa: PLC0415

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", label_tier.MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", label_tier.MAX_MESSAGE_BYTES),
        ]
    )
    protocol.pb2_grpc.add_ExtenderServicer_to_server(ExtenderService(protocol.pb2, name), server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    ready(label_tier.bound_address(listen, port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    await server.stop(grace=1.0)
    log.info("stopped")


def main(argv: Iterable[str] | None = None) -> int:
    """Runs the extender; the exit status."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on (port 0: a free port)")
    p.add_argument("--name", default=EXTENDER_NAME, help="the name declared in Hello")
    p.add_argument("--proto-dir", type=Path, default=protogen.DEFAULT_PROTO_DIR, help="the repository's proto/ directory")
    p.add_argument("--gen-dir", type=Path, default=protogen.DEFAULT_CACHE_DIR, help="where generated code is cached")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(None if argv is None else list(argv))
    try:
        import grpc  # noqa: F401, PLC0415
    except ImportError:
        print(f"grpcio is not installed for {sys.executable}: pip install -r {protogen.HERE / 'requirements.txt'}", file=sys.stderr)
        return 2
    try:
        protocol = protogen.load(args.proto_dir, args.gen_dir)
    except protogen.CodegenError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 2

    def ready(addr: str) -> None:
        print(f"listening on {addr}", file=sys.stderr, flush=True)
        logging.basicConfig(
            stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )

    try:
        asyncio.run(serve(args.listen, protocol, args.name, ready))
    except OSError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
