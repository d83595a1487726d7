"""Unit tests of the license-slots extender: its what-if logic and its
answers to Filter and PreemptionFilter requests.

Run from the repository root (tests/run.sh does, in tests/.venv):

    python -m unittest discover -s extenders/python -p 'test_*.py'
"""

from __future__ import annotations

import json
import logging
import unittest
from typing import Any

import license_slots
import protogen
from label_tier import PlacedPod
from license_slots import Listed, Session, Verdict, judge

logging.getLogger(license_slots.EXTENDER_NAME).addHandler(logging.NullHandler())

PROTOCOL = protogen.load()
pb = PROTOCOL.pb2


def pod(name: str, license: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if license:
        metadata["annotations"] = {license_slots.LICENSE_ANNOTATION: ""}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}


def placed(pod_id: int, name: str, license: bool, node: str = "n1") -> PlacedPod:
    return PlacedPod(pod_id, node, 1, "default", name, f"uid-{name}", False, pod(name, license))


ONE_SLOT = {license_slots.SLOTS_LABEL: "1"}


class JudgeTest(unittest.TestCase):
    def test_no_slot_even_with_every_listed_pod_gone_rejects(self) -> None:
        # The slot is held by a pod preemption may not evict.
        on_node = [placed(1, "vip", True), placed(2, "low", False)]
        v = judge("uid-p", ONE_SLOT, on_node, [Listed(2, "uid-low", True)])
        self.assertEqual(v, Verdict(rejected=True))

    def test_victims_freeing_the_slot_are_enough(self) -> None:
        on_node = [placed(1, "holder", True)]
        v = judge("uid-p", ONE_SLOT, on_node, [Listed(1, "uid-holder", True)])
        self.assertEqual(v, Verdict())

    def test_the_holder_is_needed_when_the_victims_hold_no_slot(self) -> None:
        # Listed most important first: the holder, then the victim berthd
        # chose; the holder must go, the other is given back.
        on_node = [placed(1, "holder", True), placed(2, "other", False)]
        listed = [Listed(1, "uid-holder", False), Listed(2, "uid-other", True)]
        v = judge("uid-p", ONE_SLOT, on_node, listed)
        self.assertEqual(v, Verdict(needed=("uid-holder",)))

    def test_a_node_without_the_label_offers_no_slot(self) -> None:
        v = judge("uid-p", {}, [placed(2, "low", False)], [Listed(2, "uid-low", True)])
        self.assertTrue(v.rejected)


class SessionTest(unittest.TestCase):
    def session(self, pods: list[PlacedPod], labels: dict[str, str]) -> Session:
        s = Session(pb)
        s.handle(pb.SchedulerMessage(open=pb.Open(protocol_version=pb.PROTOCOL_VERSION_2)))
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels}}
        s.handle(pb.SchedulerMessage(node_upsert=pb.NodeUpsert(name="n1", id=1, node=json.dumps(node).encode())))
        for p in pods:
            s.handle(
                pb.SchedulerMessage(
                    pod_upsert=pb.PodUpsert(
                        id=p.id, node_id=1, node="n1", namespace="default", name=p.name, uid=p.uid,
                        pod=json.dumps(p.obj).encode(),
                    )
                )
            )
        s.handle(pb.SchedulerMessage(nodes_synced=pb.NodesSynced(nodes=1)))
        s.handle(
            pb.SchedulerMessage(
                cycle_start=pb.CycleStart(
                    cycle_id=7, namespace="default", name="p", uid="uid-p", pod=json.dumps(pod("p", True)).encode()
                )
            )
        )
        return s

    def ask(self, s: Session, **kind: Any) -> Any:
        (out,) = s.handle(pb.SchedulerMessage(request=pb.Request(id=1, cycle_id=7, **kind)))
        return out.response

    def test_hello_declares_the_what_if_and_the_pod_feed(self) -> None:
        hello = Session(pb).hello().hello
        self.assertTrue(hello.preemption_filter)
        self.assertFalse(hello.filter_ignores_pods)
        self.assertTrue(hello.wants_pods)

    def test_filter_and_preemption_filter(self) -> None:
        s = self.session([placed(1, "holder", True), placed(2, "other", False)], ONE_SLOT)
        r = self.ask(s, filter=pb.FilterRequest(node_ids=[1]))
        self.assertEqual([(x.node_id, list(x.reasons)) for x in r.filter.rejected], [(1, [license_slots.NO_SLOT])])
        candidate = pb.PreemptionCandidate(
            node_id=1,
            pods=[
                pb.CandidatePod(id=1, uid="uid-holder", name="holder", node_id=1),
                pb.CandidatePod(id=2, uid="uid-other", name="other", victim=True, node_id=1),
            ],
        )
        r = self.ask(s, preemption_filter=pb.PreemptionFilterRequest(candidates=[candidate]))
        self.assertEqual(r.WhichOneof("result"), "preemption_filter")
        self.assertEqual(list(r.preemption_filter.rejected), [])
        self.assertEqual([(n.node_id, list(n.uids)) for n in r.preemption_filter.needed], [(1, ["uid-holder"])])


if __name__ == "__main__":
    unittest.main()
