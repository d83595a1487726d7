"""Unit tests of the label-tier extender: its logic, its protocol state
machine, the service over a real loopback gRPC stream, and the process.

Run from the repository root (tests/run.sh does, in tests/.venv):

    python -m unittest discover -s extenders/python -p 'test_*.py'
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import subprocess
import sys
import threading
import unittest
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import label_tier
import protogen
from label_tier import (
    LabelRequirement,
    NodeCache,
    ProtocolError,
    RequestError,
    Session,
    filter_nodes,
    parse_requirement,
    score_nodes,
    tier_score,
)

# The expected failures log warnings; keep the test output to the results.
logging.getLogger(label_tier.EXTENDER_NAME).addHandler(logging.NullHandler())

PROTOCOL = protogen.load()
pb = PROTOCOL.pb2

#: A guard against a hung process or stream; never what a test waits for.
GUARD_SECONDS = 60


def node_json(name: str, labels: Mapping[str, str]) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}).encode()


def pod(name: str, required: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if required is not None:
        metadata["annotations"] = {label_tier.REQUIRED_LABEL_ANNOTATION: required}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}


NODES: dict[str, dict[str, str]] = {
    "gold-hdd": {"example.com/tier": "gold", "disk": "hdd"},
    "silver-ssd": {"example.com/tier": "silver", "disk": "ssd"},
    "plain-ssd": {"disk": "ssd"},
    "bronze-nvme": {"example.com/tier": "bronze", "disk": "nvme"},
}


#: The ids the tests' berthd gives the nodes.
IDS: dict[str, int] = {name: i + 1 for i, name in enumerate(NODES)}


def labels(name: str) -> Mapping[str, str]:
    return NODES[name]


def ids(names: list[str]) -> list[int]:
    return [IDS[n] for n in names]


class RequirementTest(unittest.TestCase):
    def test_key_and_value(self) -> None:
        r = parse_requirement("disk=ssd")
        self.assertEqual(r, LabelRequirement("disk", "ssd"))
        self.assertEqual(r.reason(), "node(s) didn't have label disk=ssd")
        self.assertTrue(r.matches({"disk": "ssd"}))
        self.assertFalse(r.matches({"disk": "hdd"}))
        self.assertFalse(r.matches({}))

    def test_key_alone_means_any_value(self) -> None:
        r = parse_requirement("gpu")
        self.assertEqual(r, LabelRequirement("gpu", None))
        self.assertEqual(r.reason(), "node(s) didn't have label gpu")
        self.assertTrue(r.matches({"gpu": ""}))
        self.assertTrue(r.matches({"gpu": "a100"}))
        self.assertFalse(r.matches({"disk": "ssd"}))

    def test_spaces_trimmed_and_value_keeps_equals(self) -> None:
        self.assertEqual(parse_requirement(" a = b=c "), LabelRequirement("a", "b=c"))
        self.assertEqual(parse_requirement("zone="), LabelRequirement("zone", ""))

    def test_empty_key_is_invalid(self) -> None:
        for text in ("", "=ssd", "  =x"):
            with self.assertRaises(ValueError, msg=text):
                parse_requirement(text)


class LogicTest(unittest.TestCase):
    ALL = list(NODES)

    def test_pod_without_annotation_passes_every_node(self) -> None:
        self.assertEqual(filter_nodes(pod("p"), self.ALL, labels), [])

    def test_nodes_without_the_label_are_rejected_with_the_reason(self) -> None:
        self.assertEqual(
            filter_nodes(pod("p", "disk=ssd"), self.ALL, labels),
            [
                ("gold-hdd", "node(s) didn't have label disk=ssd"),
                ("bronze-nvme", "node(s) didn't have label disk=ssd"),
            ],
        )
        self.assertEqual(
            [n for n, _ in filter_nodes(pod("p", "example.com/tier"), self.ALL, labels)],
            ["plain-ssd"],
        )
        self.assertEqual(len(filter_nodes(pod("p", "gpu=true"), self.ALL, labels)), 4)

    def test_only_the_nodes_asked_about_are_judged(self) -> None:
        self.assertEqual(filter_nodes(pod("p", "disk=ssd"), ["silver-ssd"], labels), [])

    def test_invalid_annotation_rejects_every_node_saying_why(self) -> None:
        rejected = filter_nodes(pod("p", "=ssd"), ["gold-hdd", "plain-ssd"], labels)
        self.assertEqual([n for n, _ in rejected], ["gold-hdd", "plain-ssd"])
        self.assertIn("the label key is empty", rejected[0][1])

    def test_scores_follow_the_tier(self) -> None:
        self.assertEqual(score_nodes(self.ALL, labels), [100, 50, 0, 0])
        self.assertEqual(tier_score({"example.com/tier": "GOLD"}), 0)

    def test_node_cache(self) -> None:
        cache = NodeCache()
        cache.upsert("a", node_json("a", {"x": "1"}), 7)
        self.assertEqual(cache.name_of(7), "a")
        self.assertEqual(cache.labels("a"), {"x": "1"})
        cache.upsert("a", node_json("a", {"x": "2"}))
        self.assertEqual(cache.labels("a"), {"x": "2"})
        cache.upsert("b", b"{not json")
        with self.assertRaisesRegex(RequestError, "node b was sent as invalid JSON"):
            cache.labels("b")
        cache.upsert("b", json.dumps({"metadata": {"name": "b"}}).encode())
        self.assertEqual(cache.labels("b"), {})
        cache.delete("a", 7)
        with self.assertRaisesRegex(RequestError, "node a is not in the node cache"):
            cache.labels("a")
        with self.assertRaisesRegex(RequestError, "node id 7 is not in the node cache"):
            cache.name_of(7)
        self.assertEqual(len(cache), 1)


# ---------------------------------------------------------------------------
# The protocol state machine, message by message.


def msg(**kw: Any) -> Any:
    return pb.SchedulerMessage(**kw)


def open_msg() -> Any:
    return msg(open=pb.Open(protocol_version=pb.PROTOCOL_VERSION_2, extender_name="label-tier", scheduler="berthd/test"))


def upsert(name: str) -> Any:
    return msg(node_upsert=pb.NodeUpsert(name=name, id=IDS[name], node=node_json(name, NODES[name])))


def cycle(cycle_id: int, p: dict[str, Any]) -> Any:
    m = p["metadata"]
    return msg(
        cycle_start=pb.CycleStart(
            cycle_id=cycle_id,
            pod=json.dumps(p).encode(),
            namespace=m["namespace"],
            name=m["name"],
            uid=m["uid"],
        )
    )


def filter_req(rid: int, cycle_id: int, nodes: list[str], score: bool = False) -> Any:
    return msg(request=pb.Request(id=rid, cycle_id=cycle_id, filter=pb.FilterRequest(node_ids=ids(nodes), score=score)))


def score_req(rid: int, cycle_id: int, nodes: list[str]) -> Any:
    return msg(request=pb.Request(id=rid, cycle_id=cycle_id, score=pb.ScoreRequest(node_ids=ids(nodes))))


def synced_session() -> Session:
    s = Session(pb)
    s.handle(open_msg())
    for name in NODES:
        s.handle(upsert(name))
    s.handle(msg(nodes_synced=pb.NodesSynced(nodes=len(NODES))))
    return s


def only_response(out: list[Any]) -> Any:
    assert len(out) == 1, out
    assert out[0].WhichOneof("message") == "response", out
    return out[0].response


class SessionTest(unittest.TestCase):
    def test_open_is_answered_with_hello(self) -> None:
        out = Session(pb).handle(open_msg())
        self.assertEqual(len(out), 1)
        hello = out[0].hello
        self.assertEqual(hello.name, "label-tier")
        self.assertEqual(hello.protocol_version, pb.PROTOCOL_VERSION_2)
        self.assertEqual(list(hello.points), [pb.EXTENSION_POINT_FILTER, pb.EXTENSION_POINT_SCORE])
        self.assertEqual(hello.score_normalization, pb.SCORE_NORMALIZATION_NONE)
        self.assertTrue(hello.wants_nodes)

    def test_hello_asks_for_pods_only_when_told(self) -> None:
        self.assertFalse(Session(pb).handle(open_msg())[0].hello.wants_pods)
        self.assertTrue(Session(pb, wants_pods=True).handle(open_msg())[0].hello.wants_pods)

    def test_the_pod_feed_is_kept_by_node(self) -> None:
        s = Session(pb, wants_pods=True)
        s.handle(open_msg())
        for name in NODES:
            s.handle(upsert(name))

        def placed(pid: int, name: str, node: str, assumed: bool = False) -> Any:
            return msg(
                pod_upsert=pb.PodUpsert(
                    id=pid,
                    node_id=IDS[node],
                    node=node,
                    namespace="default",
                    name=name,
                    uid=f"uid-{name}",
                    assumed=assumed,
                    pod=json.dumps(pod(name)).encode(),
                )
            )

        self.assertEqual(s.handle(placed(1, "a", "gold-hdd")), [])
        s.handle(placed(2, "b", "gold-hdd", assumed=True))
        s.handle(msg(nodes_synced=pb.NodesSynced(nodes=len(NODES))))
        self.assertEqual(s.pods.count_on("gold-hdd"), 2)
        self.assertTrue(s.pods.on_node("gold-hdd")[1].assumed)
        self.assertEqual(s.pods.on_node("gold-hdd")[0].obj["metadata"]["name"], "a")
        # Bound, then moved: the same pod, counted once, where it is now.
        s.handle(placed(2, "b", "gold-hdd"))
        s.handle(placed(2, "b", "silver-ssd"))
        self.assertEqual([p.name for p in s.pods.on_node("gold-hdd")], ["a"])
        self.assertEqual([p.name for p in s.pods.on_node("silver-ssd")], ["b"])
        s.handle(msg(pod_delete=pb.PodDelete(id=1, node_id=IDS["gold-hdd"], uid="uid-a")))
        self.assertEqual((s.pods.count_on("gold-hdd"), len(s.pods)), (0, 1))
        # An unknown id is logged, not fatal.
        self.assertEqual(s.handle(msg(pod_delete=pb.PodDelete(id=9))), [])

    def test_the_first_message_must_be_open_and_only_once(self) -> None:
        with self.assertRaisesRegex(ProtocolError, "first message must be Open, got node_upsert"):
            Session(pb).handle(upsert("gold-hdd"))
        s = Session(pb)
        s.handle(open_msg())
        with self.assertRaisesRegex(ProtocolError, "second Open"):
            s.handle(open_msg())

    def test_filter_and_score_by_cycle(self) -> None:
        s = synced_session()
        self.assertEqual(s.handle(cycle(7, pod("web", "disk=ssd"))), [])
        r = only_response(s.handle(filter_req(1, 7, list(NODES))))
        self.assertEqual(r.id, 1)
        self.assertEqual(r.WhichOneof("result"), "filter")
        self.assertEqual([x.node_id for x in r.filter.rejected], ids(["gold-hdd", "bronze-nvme"]))
        for x in r.filter.rejected:
            self.assertEqual(x.code, pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE)
            self.assertEqual(list(x.reasons), ["node(s) didn't have label disk=ssd"])
        self.assertEqual(list(r.filter.scores), [])
        r = only_response(s.handle(score_req(2, 7, ["plain-ssd", "silver-ssd"])))
        self.assertEqual((r.id, list(r.score.scores)), (2, [0, 50]))

    def test_filter_brings_the_scores_when_asked(self) -> None:
        s = synced_session()
        s.handle(cycle(7, pod("web", "disk=ssd")))
        r = only_response(s.handle(filter_req(1, 7, ["silver-ssd", "gold-hdd", "plain-ssd"], score=True)))
        self.assertEqual([x.node_id for x in r.filter.rejected], ids(["gold-hdd"]))
        self.assertEqual(list(r.filter.scores), [50, 100, 0])

    def test_preemption_filter_answers_as_filter_and_hello_says_so(self) -> None:
        hello = Session(pb).handle(open_msg())[0].hello
        self.assertTrue(hello.preemption_filter)
        self.assertTrue(hello.filter_ignores_pods)
        s = synced_session()
        s.handle(cycle(7, pod("web", "disk=ssd")))
        candidates = [
            pb.PreemptionCandidate(node_id=IDS[n], pods=[pb.CandidatePod(id=1, uid="uid-v", victim=True)])
            for n in ("gold-hdd", "silver-ssd")
        ]
        req = msg(request=pb.Request(id=1, cycle_id=7, preemption_filter=pb.PreemptionFilterRequest(candidates=candidates)))
        r = only_response(s.handle(req))
        self.assertEqual(r.WhichOneof("result"), "preemption_filter")
        # Evicting pods adds no label: gold-hdd stays rejected, silver-ssd
        # needs nothing more than the victims.
        self.assertEqual([x.node_id for x in r.preemption_filter.rejected], ids(["gold-hdd"]))
        self.assertEqual(list(r.preemption_filter.needed), [])

    def test_node_changes_are_followed(self) -> None:
        s = synced_session()
        s.handle(cycle(1, pod("p")))
        s.handle(
            msg(
                node_upsert=pb.NodeUpsert(
                    name="plain-ssd", id=IDS["plain-ssd"], node=node_json("plain-ssd", {"example.com/tier": "gold"})
                )
            )
        )
        r = only_response(s.handle(score_req(3, 1, ["plain-ssd"])))
        self.assertEqual(list(r.score.scores), [100])
        s.handle(msg(node_delete=pb.NodeDelete(name="plain-ssd", id=IDS["plain-ssd"])))
        r = only_response(s.handle(score_req(4, 1, ["plain-ssd"])))
        self.assertEqual(r.WhichOneof("result"), "error")
        self.assertIn(f"node id {IDS['plain-ssd']} is not in the node cache", r.error.message)

    def test_cycle_end_forgets_the_pod(self) -> None:
        s = synced_session()
        s.handle(cycle(5, pod("p")))
        self.assertIn(5, s.cycles)
        self.assertEqual(s.handle(msg(cycle_end=pb.CycleEnd(cycle_id=5))), [])
        self.assertEqual(s.cycles, {})
        r = only_response(s.handle(filter_req(9, 5, ["gold-hdd"])))
        self.assertEqual(r.error.message, "unknown cycle 5 (no CycleStart for it on this stream)")

    def test_errors_for_what_cannot_be_answered(self) -> None:
        s = Session(pb)
        s.handle(open_msg())
        s.handle(cycle(1, pod("p")))
        r = only_response(s.handle(filter_req(1, 1, [])))
        self.assertEqual(r.error.message, "a request before NodesSynced")

        s = synced_session()
        s.handle(cycle(1, pod("p")))
        reserve = msg(
            request=pb.Request(id=2, cycle_id=1, reserve=pb.ReserveRequest(node="gold-hdd", reservation_id="uid-p/1"))
        )
        r = only_response(s.handle(reserve))
        self.assertEqual((r.id, r.error.message), (2, "label-tier serves Filter and Score only, not reserve"))
        r = only_response(s.handle(msg(request=pb.Request(id=3, cycle_id=1))))
        self.assertEqual(r.error.message, "label-tier serves Filter and Score only, not a request without a kind")

        s.handle(msg(cycle_start=pb.CycleStart(cycle_id=2, pod=b"[1,", namespace="default", name="bad", uid="u")))
        r = only_response(s.handle(filter_req(4, 2, ["gold-hdd"])))
        self.assertIn("the pod default/bad was sent as invalid JSON", r.error.message)
        self.assertEqual(s.errors, 3)

    def test_cancel_and_empty_messages_send_nothing(self) -> None:
        s = synced_session()
        self.assertEqual(s.handle(msg(cancel=pb.Cancel(id=1))), [])
        self.assertEqual(s.handle(msg()), [])


# ---------------------------------------------------------------------------
# Over a real gRPC stream on loopback.


class OverGrpcTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_session_over_loopback(self) -> None:
        import grpc

        server = grpc.aio.server()
        PROTOCOL.pb2_grpc.add_ExtenderServicer_to_server(label_tier.ExtenderService(pb), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = PROTOCOL.pb2_grpc.ExtenderStub(channel).Session()
                await call.write(open_msg())
                first = await asyncio.wait_for(call.read(), GUARD_SECONDS)
                self.assertEqual(first.hello.name, "label-tier")
                for name in NODES:
                    await call.write(upsert(name))
                await call.write(msg(nodes_synced=pb.NodesSynced(nodes=len(NODES))))
                await call.write(cycle(1, pod("db", "disk")))
                await call.write(filter_req(10, 1, list(NODES)))
                await call.write(score_req(11, 1, ["gold-hdd", "silver-ssd"]))
                await call.write(msg(cycle_end=pb.CycleEnd(cycle_id=1)))
                answers = {}
                for _ in range(2):
                    m = await asyncio.wait_for(call.read(), GUARD_SECONDS)
                    answers[m.response.id] = m.response
                self.assertEqual(list(answers[10].filter.rejected), [])
                self.assertEqual(list(answers[11].score.scores), [100, 50])
                await call.done_writing()
                self.assertIs(await asyncio.wait_for(call.read(), GUARD_SECONDS), grpc.aio.EOF)
                self.assertEqual(await call.code(), grpc.StatusCode.OK)
        finally:
            await server.stop(None)

    async def test_a_stream_not_starting_with_open_is_refused(self) -> None:
        import grpc

        server = grpc.aio.server()
        PROTOCOL.pb2_grpc.add_ExtenderServicer_to_server(label_tier.ExtenderService(pb), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = PROTOCOL.pb2_grpc.ExtenderStub(channel).Session()
                await call.write(msg(nodes_synced=pb.NodesSynced(nodes=0)))
                with self.assertRaises(grpc.aio.AioRpcError) as e:
                    await asyncio.wait_for(call.read(), GUARD_SECONDS)
                self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
                self.assertIn("first message must be Open", e.exception.details() or "")
        finally:
            await server.stop(None)


class ProcessTest(unittest.TestCase):
    def test_prints_the_address_first_serves_and_stops_on_sigterm(self) -> None:
        script = Path(label_tier.__file__).resolve()
        proc = subprocess.Popen(
            [sys.executable, str(script), "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        guard = threading.Timer(GUARD_SECONDS, proc.kill)
        guard.start()
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline().rstrip("\n")
            m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)", first)
            self.assertIsNotNone(m, f"first stderr line: {first!r}")
            assert m is not None
            self.assertNotEqual(int(m.group(1)), 0)
            hello = asyncio.run(self._hello(f"127.0.0.1:{m.group(1)}"))
            self.assertEqual(hello.name, "label-tier")
            proc.send_signal(signal.SIGTERM)
            rest = proc.stderr.read()
            self.assertEqual(proc.wait(), 0, rest)
            self.assertIn("session opened scheduler=berthd/test extender_name=label-tier", rest)
            self.assertIn("stopped", rest)
        finally:
            guard.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()

    @staticmethod
    async def _hello(addr: str) -> Any:
        import grpc

        async with grpc.aio.insecure_channel(addr) as channel:
            call = PROTOCOL.pb2_grpc.ExtenderStub(channel).Session()
            await call.write(open_msg())
            first = await asyncio.wait_for(call.read(), GUARD_SECONDS)
            await call.done_writing()
            await asyncio.wait_for(call.read(), GUARD_SECONDS)
            return first.hello


if __name__ == "__main__":
    unittest.main()
