#!/usr/bin/env python3
"""label-tier: a berth remote extender in Python, serving Filter and Score.

It speaks berth.extender.v1 (``proto/berth/extender/v1/extender.proto``) with
nothing but grpcio and the code ``grpc_tools.protoc`` generates from that
file at start-up (see protogen.py).

* **Filter**: a pod annotated ``example.com/required-node-label: key=value``
  fits only nodes labelled ``key=value``; with ``key`` alone, nodes that have
  the label ``key`` with any value. Other nodes are rejected (unresolvable:
  preemption cannot add a label) with the reason
  ``node(s) didn't have label key=value``. Pods without the annotation pass
  every node. An annotation with an empty key rejects every node, saying so.
* **Score** (0..100, used as is): the node's ``example.com/tier`` label:
  ``gold`` 100, ``silver`` 50, anything else or none 0.
* **Preemption's what-if** (``PreemptionFilterRequest``): a node's labels
  do not change when pods are evicted, so a candidate is rejected exactly
  when Filter rejects the node, and otherwise needs nothing more evicted.
  Its Hello says so (``filter_ignores_pods``): berthd then reuses the
  cycle's verdicts and does not even ask. Generated from a protocol file
  older than the what-if (``--proto-dir``), it declares neither and
  berthd asks it a plain Filter instead, which it answers as ever.

Labels come from the node cache: the extender asks for nodes
(``wants_nodes``) and keeps each ``NodeUpsert``'s JSON, parsed with ``json``,
under the node's name and the id berthd gave it: requests name nodes by id
(protocol version 2). When berthd asks for the scores with the Filter
request (``FilterRequest.score``), they come in the same answer.

With ``--wants-pods`` it also asks for the pod feed (``wants_pods``): berthd
streams every pod placed on a node, bound or assumed (``PodUpsert``), each
change once, and its removal (``PodDelete``); the session keeps them in a
``PodTable`` by node (``Session.pods``), logging each change. The scores
above do not use it; an extender that counts or packs pods would.

Run: ``python label_tier.py --listen 127.0.0.1:7070``. The first line on
stderr is ``listening on HOST:PORT`` with the port bound (``--listen`` may
give port 0). SIGTERM or SIGINT stop it cleanly (exit status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import protogen

#: The name this extender gives itself in its Hello.
EXTENDER_NAME = "label-tier"
#: The pod annotation naming the node label a pod needs.
REQUIRED_LABEL_ANNOTATION = "example.com/required-node-label"
#: The node label scores are read from.
TIER_LABEL = "example.com/tier"
#: The score of each tier; any other value (or none) scores 0.
TIER_SCORES: Mapping[str, int] = {"gold": 100, "silver": 50}
#: The largest message either side sends (as berthd's limit).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

log = logging.getLogger(EXTENDER_NAME)


# ---------------------------------------------------------------------------
# The logic, on plain Python values (no protobuf), so it tests on its own.


class RequestError(Exception):
    """A request that cannot be answered; it is answered with an Error."""


@dataclass(frozen=True)
class LabelRequirement:
    """A node label a pod needs: ``key=value``, or ``key`` with any value."""

    key: str
    value: str | None = None

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` has the label."""
        if self.key not in labels:
            return False
        return self.value is None or labels[self.key] == self.value

    def reason(self) -> str:
        """The rejection reason of a node without the label."""
        return f"node(s) didn't have label {self}"


def parse_requirement(text: str) -> LabelRequirement:
    """Parses an annotation value: ``key=value`` or ``key`` (spaces around
    either are ignored; the value may itself contain ``=``).

    Raises ValueError for an empty key.
    """
    key, sep, value = text.partition("=")
    key = key.strip()
    if not key:
        raise ValueError(f"invalid {REQUIRED_LABEL_ANNOTATION} annotation {text!r}: the label key is empty")
    return LabelRequirement(key, value.strip() if sep else None)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.annotations`` of a Kubernetes object ({} when absent)."""
    metadata = obj.get("metadata") or {}
    return metadata.get("annotations") or {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels`` of a Kubernetes object ({} when absent)."""
    metadata = obj.get("metadata") or {}
    return metadata.get("labels") or {}


def filter_nodes(
    pod: Mapping[str, Any],
    nodes: Sequence[str],
    node_labels: Callable[[str], Mapping[str, str]],
) -> list[tuple[str, str]]:
    """The nodes (of ``nodes``) that cannot run ``pod``, each with its reason.

    ``node_labels`` gives a node's labels (and raises RequestError for a node
    it does not know). Nodes not listed pass.
    """
    annotation = annotations_of(pod).get(REQUIRED_LABEL_ANNOTATION)
    if annotation is None:
        return []
    try:
        requirement = parse_requirement(annotation)
    except ValueError as e:
        return [(node, str(e)) for node in nodes]
    return [(node, requirement.reason()) for node in nodes if not requirement.matches(node_labels(node))]


def tier_score(labels: Mapping[str, str]) -> int:
    """A node's score from its tier label."""
    return TIER_SCORES.get(labels.get(TIER_LABEL, ""), 0)


def score_nodes(nodes: Sequence[str], node_labels: Callable[[str], Mapping[str, str]]) -> list[int]:
    """One score per node, in order."""
    return [tier_score(node_labels(node)) for node in nodes]


class NodeCache:
    """The nodes berthd streamed on one session, by name and by id."""

    def __init__(self) -> None:
        self._nodes: dict[str, Mapping[str, Any] | None] = {}
        self._errors: dict[str, str] = {}
        self._names: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def upsert(self, name: str, raw: bytes, node_id: int = 0) -> None:
        """Adds or replaces a node from its Kubernetes JSON, under its id. A
        node that is not valid JSON is kept as invalid: requests that need
        its labels fail, naming it."""
        self._names[node_id] = name
        self._errors.pop(name, None)
        try:
            node = json.loads(raw)
            if not isinstance(node, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            log.warning("node %s is not valid JSON: %s", name, e)
            self._nodes[name] = None
            self._errors[name] = f"node {name} was sent as invalid JSON: {e}"
            return
        self._nodes[name] = node

    def delete(self, name: str, node_id: int = 0) -> None:
        """Forgets a node (no-op if unknown)."""
        self._nodes.pop(name, None)
        self._errors.pop(name, None)
        self._names.pop(node_id, None)

    def name_of(self, node_id: int) -> str:
        """The name of the node berthd calls ``node_id``; RequestError if
        berthd never sent it."""
        name = self._names.get(node_id)
        if name is None:
            raise RequestError(f"node id {node_id} is not in the node cache (no NodeUpsert for it on this stream)")
        return name

    def labels(self, name: str) -> Mapping[str, str]:
        """A node's labels; RequestError if it is unknown or invalid."""
        if name not in self._nodes:
            raise RequestError(f"node {name} is not in the node cache (no NodeUpsert for it on this stream)")
        node = self._nodes[name]
        if node is None:
            raise RequestError(self._errors[name])
        return labels_of(node)


@dataclass(frozen=True)
class PlacedPod:
    """A pod placed on a node, as a PodUpsert sent it."""

    id: int
    node: str
    node_id: int
    namespace: str
    name: str
    uid: str
    #: Assumed (a scheduling cycle chose the node, the binding is in
    #: flight) rather than bound.
    assumed: bool
    #: The parsed pod, or None if its JSON was invalid.
    obj: Mapping[str, Any] | None

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


class PodTable:
    """The pods berthd streamed on one session (the pod feed), by id and by
    node name."""

    def __init__(self) -> None:
        self._by_id: dict[int, PlacedPod] = {}
        self._on_node: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def upsert(self, pod: PlacedPod) -> PlacedPod | None:
        """Adds or replaces a pod (it may have moved); returns the one it
        replaced."""
        old = self._by_id.get(pod.id)
        if old is not None:
            self._unindex(old)
        self._by_id[pod.id] = pod
        self._on_node.setdefault(pod.node, set()).add(pod.id)
        return old

    def delete(self, pod_id: int) -> PlacedPod | None:
        """Forgets a pod; returns it (None if unknown)."""
        old = self._by_id.pop(pod_id, None)
        if old is not None:
            self._unindex(old)
        return old

    def on_node(self, node: str) -> list[PlacedPod]:
        """The pods on the node named ``node``, by id."""
        return [self._by_id[i] for i in sorted(self._on_node.get(node, ()))]

    def count_on(self, node: str) -> int:
        """How many pods are on the node named ``node``."""
        return len(self._on_node.get(node, ()))

    def _unindex(self, pod: PlacedPod) -> None:
        ids = self._on_node.get(pod.node)
        if ids is not None:
            ids.discard(pod.id)
            if not ids:
                del self._on_node[pod.node]


def knows_preemption_filter(pb: Any) -> bool:
    """Whether the generated code has preemption's what-if (a protocol file
    older than it has not: the extender then declares none of it)."""
    return "preemption_filter" in pb.Hello.DESCRIPTOR.fields_by_name


def parse_json_object(raw: bytes) -> Mapping[str, Any] | None:
    """A JSON object, or None if ``raw`` is not one."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


@dataclass
class CyclePod:
    """The pod of one cycle, as its CycleStart sent it."""

    namespace: str
    name: str
    uid: str
    #: The parsed pod, or None if its JSON was invalid (see ``error``).
    obj: Mapping[str, Any] | None
    error: str | None = None

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, namespace: str, name: str, uid: str, raw: bytes) -> CyclePod:
        """From a CycleStart's fields."""
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            return cls(namespace, name, uid, None, f"the pod {namespace}/{name} was sent as invalid JSON: {e}")
        return cls(namespace, name, uid, obj)


# ---------------------------------------------------------------------------
# The protocol: one Session per stream.


class ProtocolError(Exception):
    """berthd broke the protocol in a way that ends the stream."""


@dataclass
class Session:
    """The extender's side of one Session stream, as a state machine: each
    SchedulerMessage goes in, the ExtenderMessages to send come out.

    Requests are answered as they arrive (Filter and Score are lookups in
    memory), so a Cancel always finds its request already answered; it is
    logged and otherwise has nothing to stop.
    """

    pb: Any
    name: str = EXTENDER_NAME
    nodes: NodeCache = field(default_factory=NodeCache)
    #: Whether Hello asks for the pod feed.
    wants_pods: bool = False
    #: The pods placed on the nodes (only with ``wants_pods``).
    pods: PodTable = field(default_factory=PodTable)
    #: Pods by cycle id, from CycleStart to CycleEnd.
    cycles: dict[int, CyclePod] = field(default_factory=dict)
    opened: bool = False
    synced: bool = False
    #: Requests answered with an Error, for logs and tests.
    errors: int = 0

    def hello(self) -> Any:
        """The declaration sent in answer to Open."""
        pb = self.pb
        hello = pb.Hello(
            name=self.name,
            protocol_version=pb.PROTOCOL_VERSION_2,
            points=[pb.EXTENSION_POINT_FILTER, pb.EXTENSION_POINT_SCORE],
            score_normalization=pb.SCORE_NORMALIZATION_NONE,
            wants_nodes=True,
            wants_pods=self.wants_pods,
        )
        if knows_preemption_filter(pb):
            # Labels do not move when pods are evicted.
            hello.preemption_filter = True
            hello.filter_ignores_pods = True
        return pb.ExtenderMessage(hello=hello)

    def handle(self, message: Any) -> list[Any]:
        """Applies one SchedulerMessage; returns the ExtenderMessages to send.

        Raises ProtocolError when the stream cannot go on (a first message
        that is not Open, a second Open).
        """
        kind = message.WhichOneof("message")
        if not self.opened and kind != "open":
            raise ProtocolError(f"the first message must be Open, got {kind or 'an empty message'}")
        if kind == "open":
            return self._open(message.open)
        if kind == "node_upsert":
            u = message.node_upsert
            self.nodes.upsert(u.name, u.node, u.id)
            log.debug("node upserted name=%s id=%d", u.name, u.id)
        elif kind == "node_delete":
            d = message.node_delete
            self.nodes.delete(d.name, d.id)
            log.info("node deleted name=%s id=%d", d.name, d.id)
        elif kind == "nodes_synced":
            self.synced = True
            log.info(
                "nodes synced nodes=%d cached=%d pods=%d", message.nodes_synced.nodes, len(self.nodes), len(self.pods)
            )
        elif kind == "pod_upsert":
            u = message.pod_upsert
            obj = parse_json_object(u.pod)
            if obj is None:
                log.warning("pod %s/%s was sent as invalid JSON: kept without its object", u.namespace, u.name)
            pod = PlacedPod(u.id, u.node, u.node_id, u.namespace, u.name, u.uid, u.assumed, obj)
            self.pods.upsert(pod)
            log.info(
                "pod placed id=%d pod=%s node=%s node_id=%d assumed=%s pods_on_node=%d",
                pod.id,
                pod.key,
                pod.node,
                pod.node_id,
                str(pod.assumed).lower(),
                self.pods.count_on(pod.node),
            )
        elif kind == "pod_delete":
            d = message.pod_delete
            gone = self.pods.delete(d.id)
            if gone is None:
                log.warning("pod_delete of unknown pod id=%d uid=%s", d.id, d.uid)
            else:
                log.info("pod removed id=%d pod=%s node=%s node_id=%d", gone.id, gone.key, gone.node, d.node_id)
        elif kind == "cycle_start":
            c = message.cycle_start
            if c.cycle_id in self.cycles:
                log.warning("CycleStart for cycle %d, which is open; replacing its pod", c.cycle_id)
            self.cycles[c.cycle_id] = CyclePod.parse(c.namespace, c.name, c.uid, c.pod)
        elif kind == "cycle_end":
            self.cycles.pop(message.cycle_end.cycle_id, None)
        elif kind == "request":
            return [self.pb.ExtenderMessage(response=self._answer(message.request))]
        elif kind == "cancel":
            log.info("cancel id=%d: already answered", message.cancel.id)
        else:
            log.warning("an empty message; ignored")
        return []

    def _open(self, open_message: Any) -> list[Any]:
        if self.opened:
            raise ProtocolError("a second Open on the stream")
        self.opened = True
        if open_message.protocol_version != self.pb.PROTOCOL_VERSION_2:
            # Hello says which version this extender speaks; berthd closes
            # the stream if it cannot speak it.
            log.warning("berthd speaks protocol version %d", open_message.protocol_version)
        log.info(
            "session opened scheduler=%s extender_name=%s",
            open_message.scheduler,
            open_message.extender_name,
        )
        return [self.hello()]

    def _answer(self, request: Any) -> Any:
        """The Response to one Request: its result, or an Error."""
        pb = self.pb
        try:
            return pb.Response(id=request.id, **self._result(request))
        except RequestError as e:
            self.errors += 1
            log.warning("request failed id=%d: %s", request.id, e)
            return pb.Response(id=request.id, error=pb.Error(message=str(e)))
        except Exception as e:  # a bug here must not end the session
            self.errors += 1
            log.exception("request failed id=%d", request.id)
            return pb.Response(id=request.id, error=pb.Error(message=f"{self.name}: internal error: {e!r}"))

    def _result(self, request: Any) -> dict[str, Any]:
        """The result field of the Response, by name; RequestError if none."""
        pb = self.pb
        kind = request.WhichOneof("kind")
        if kind not in ("filter", "score", "preemption_filter"):
            raise RequestError(f"{self.name} serves Filter and Score only, not {kind or 'a request without a kind'}")
        if not self.synced:
            raise RequestError("a request before NodesSynced")
        pod = self.cycles.get(request.cycle_id)
        if pod is None:
            raise RequestError(f"unknown cycle {request.cycle_id} (no CycleStart for it on this stream)")
        if pod.obj is None:
            raise RequestError(pod.error or "invalid pod")
        if kind == "filter":
            ids = list(request.filter.node_ids)
            nodes = [self.nodes.name_of(i) for i in ids]
            id_of = dict(zip(nodes, ids))
            rejected = filter_nodes(pod.obj, nodes, self.nodes.labels)
            log.info("filter pod=%s nodes=%d rejected=%d", pod.key, len(nodes), len(rejected))
            answer = pb.FilterResponse(
                rejected=[
                    pb.NodeStatus(node_id=id_of[node], code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, reasons=[reason])
                    for node, reason in rejected
                ]
            )
            if request.filter.score:
                # One score per requested node; those of rejected nodes are
                # not used, so every node is scored alike.
                scores = score_nodes(nodes, self.nodes.labels)
                log.info("score pod=%s scores=%s", pod.key, ",".join(f"{n}:{s}" for n, s in zip(nodes, scores)))
                answer.scores.extend(scores)
            return {"filter": answer}
        if kind == "preemption_filter":
            # A label verdict holds whatever is evicted: the candidates
            # Filter rejects are rejected, the others need nothing more.
            ids = [c.node_id for c in request.preemption_filter.candidates]
            nodes = [self.nodes.name_of(i) for i in ids]
            id_of = dict(zip(nodes, ids))
            rejected = filter_nodes(pod.obj, nodes, self.nodes.labels)
            log.info("preemption_filter pod=%s candidates=%d rejected=%d", pod.key, len(nodes), len(rejected))
            return {
                "preemption_filter": pb.PreemptionFilterResponse(
                    rejected=[
                        pb.NodeStatus(node_id=id_of[node], code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, reasons=[reason])
                        for node, reason in rejected
                    ]
                )
            }
        nodes = [self.nodes.name_of(i) for i in request.score.node_ids]
        scores = score_nodes(nodes, self.nodes.labels)
        log.info("score pod=%s scores=%s", pod.key, ",".join(f"{n}:{s}" for n, s in zip(nodes, scores)))
        return {"score": pb.ScoreResponse(scores=scores)}


class ExtenderService:
    """The Extender gRPC service: a fresh Session per stream."""

    def __init__(self, pb: Any, name: str = EXTENDER_NAME, wants_pods: bool = False) -> None:
        self.pb = pb
        self.name = name
        self.wants_pods = wants_pods

    async def Session(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:  # noqa: N802 (gRPC method name)
        """Serves one stream until berthd closes it."""
        import grpc  # noqa: PLC0415 (imported by main before this runs)

        session = Session(self.pb, self.name, wants_pods=self.wants_pods)
        try:
            async for message in requests:
                try:
                    answers = session.handle(message)
                except ProtocolError as e:
                    log.warning("protocol error: %s", e)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                    return
                for answer in answers:
                    yield answer
        finally:
            log.info("session closed cycles_open=%d", len(session.cycles))


# ---------------------------------------------------------------------------
# The process.


def bound_address(listen: str, port: int) -> str:
    """``listen`` with its port replaced by the one bound."""
    host, _, _ = listen.rpartition(":")
    return f"{host}:{port}"


async def serve(
    listen: str,
    protocol: protogen.Protocol,
    name: str,
    ready: Callable[[str], None],
    wants_pods: bool = False,
) -> None:
    """Serves on ``listen`` until SIGTERM or SIGINT; calls ``ready`` with the
    address bound once serving."""
    import grpc  # noqa: PLC0415

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
    )
    protocol.pb2_grpc.add_ExtenderServicer_to_server(ExtenderService(protocol.pb2, name, wants_pods), server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {listen}: {e}") from e
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    ready(bound_address(listen, port))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    # Open streams end (berthd sees the stream close and redials later).
    await server.stop(grace=1.0)
    log.info("stopped")


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on (port 0: a free port)")
    p.add_argument("--name", default=EXTENDER_NAME, help="the name declared in Hello")
    p.add_argument("--proto-dir", type=Path, default=protogen.DEFAULT_PROTO_DIR, help="the repository's proto/ directory")
    p.add_argument("--gen-dir", type=Path, default=protogen.DEFAULT_CACHE_DIR, help="where generated code is cached")
    p.add_argument(
        "--wants-pods", action="store_true", help="ask berthd for the pods placed on the nodes (the pod feed)"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p.parse_args(None if argv is None else list(argv))


def main(argv: Iterable[str] | None = None) -> int:
    """Runs the extender; the exit status."""
    args = parse_args(argv)
    try:
        import grpc  # noqa: F401, PLC0415
    except ImportError:
        print(
            f"grpcio is not installed for {sys.executable}: "
            f"pip install -r {protogen.HERE / 'requirements.txt'} (tests/run.sh does it into tests/.venv)",
            file=sys.stderr,
        )
        return 2
    try:
        protocol = protogen.load(args.proto_dir, args.gen_dir)
    except protogen.CodegenError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 2

    def ready(addr: str) -> None:
        # The first line on stderr, before any log line: starters read it.
        print(f"listening on {addr}", file=sys.stderr, flush=True)
        logging.basicConfig(
            stream=sys.stderr,
            level=args.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )

    try:
        asyncio.run(serve(args.listen, protocol, args.name, ready, args.wants_pods))
    except OSError as e:
        print(f"{EXTENDER_NAME}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
