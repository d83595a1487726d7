"""Unit tests of the gang-quota extender: its logic and its protocol state
machine at the group points (the process meets berthd in
tests/tests/extender_groups.rs).

Run from the repository root (tests/run.sh does, in tests/.venv):

    python -m unittest discover -s extenders/python -p 'test_*.py'
"""

from __future__ import annotations

import json
import logging
import unittest
from decimal import Decimal
from typing import Any

import gang_quota
import protogen
from gang_quota import Limits, Session, gang_verdict, parse_cpu, parse_limits, pod_cpu

logging.getLogger(gang_quota.EXTENDER_NAME).addHandler(logging.NullHandler())

PROTOCOL = protogen.load()
pb = PROTOCOL.pb2


def pod(name: str, *cpus: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": f"c{i}", "resources": {"requests": {"cpu": c}}} for i, c in enumerate(cpus)],
            "schedulingGroup": {"podGroupName": "train"},
        },
    }


class LogicTest(unittest.TestCase):
    def test_cpu_quantities(self) -> None:
        self.assertEqual(parse_cpu("2"), Decimal(2))
        self.assertEqual(parse_cpu("1.5"), Decimal("1.5"))
        self.assertEqual(parse_cpu("500m"), Decimal("0.5"))
        with self.assertRaises(ValueError):
            parse_cpu("two")

    def test_a_pod_requests_the_sum_of_its_containers(self) -> None:
        self.assertEqual(pod_cpu(pod("p", "1", "500m")), Decimal("1.5"))
        self.assertEqual(pod_cpu({"spec": {"containers": [{"name": "c"}]}}), Decimal(0))

    def test_limits_per_namespace_and_for_all(self) -> None:
        limits = parse_limits(["8", "ml=4,batch=16"])
        self.assertEqual(limits.of("ml"), Decimal(4))
        self.assertEqual(limits.of("other"), Decimal(8))
        self.assertIsNone(parse_limits([]).of("ml"))
        with self.assertRaises(ValueError):
            parse_limits(["=4"])

    def test_a_gang_over_its_limit_is_refused_saying_by_how_much(self) -> None:
        limits = Limits(None, {"ml": Decimal(4)})
        ok, why = gang_verdict("ml", "train", [pod("a", "2"), pod("b", "2")], limits)
        self.assertTrue(ok, why)
        ok, why = gang_verdict("ml", "train", [pod("a", "2"), pod("b", "2.5")], limits)
        self.assertFalse(ok)
        self.assertEqual(why, "pod group ml/train requests 4.5 CPUs, over the 4 CPUs a gang may take in namespace ml")
        self.assertTrue(gang_verdict("other", "x", [pod("a", "64")], limits)[0])


def start(session: Session, cycle_id: int, pods: list[dict[str, Any]]) -> None:
    session.handle(
        pb.SchedulerMessage(
            group_cycle_start=pb.GroupCycleStart(
                cycle_id=cycle_id,
                pod_group=json.dumps({"metadata": {"name": "train", "namespace": "ml"}}).encode(),
                namespace="ml",
                name="train",
                pods=[
                    pb.GroupMember(namespace="ml", name=p["metadata"]["name"], uid=p["metadata"]["uid"], pod=json.dumps(p).encode())
                    for p in pods
                ],
            )
        )
    )


def ask(session: Session, request: Any) -> Any:
    (answer,) = session.handle(pb.SchedulerMessage(request=request))
    return answer.response


class SessionTest(unittest.TestCase):
    def test_hello_declares_the_group_points(self) -> None:
        s = Session(pb, Limits())
        (hello,) = s.handle(pb.SchedulerMessage(open=pb.Open(protocol_version=pb.PROTOCOL_VERSION_2)))
        self.assertEqual(
            list(hello.hello.points), [pb.EXTENSION_POINT_GROUP_PERMIT, pb.EXTENSION_POINT_POD_GROUP_POST_FILTER]
        )

    def test_group_permit_judges_the_placed_pods_of_the_cycle(self) -> None:
        s = Session(pb, Limits(Decimal(3)))
        start(s, 7, [pod("w0", "2"), pod("w1", "2")])
        placement = [pb.Placement(uid="uid-w0", node="n1"), pb.Placement(uid="uid-w1", node="n2")]
        r = ask(s, pb.Request(id=1, cycle_id=7, group_permit=pb.GroupPermitRequest(placement=placement)))
        self.assertEqual(r.group_permit.status.code, pb.CODE_UNSCHEDULABLE)
        self.assertIn("requests 4 CPUs, over the 3 CPUs", r.group_permit.status.reasons[0])
        # Only the pods placed count.
        r = ask(s, pb.Request(id=2, cycle_id=7, group_permit=pb.GroupPermitRequest(placement=placement[:1])))
        self.assertEqual(r.group_permit.status.code, pb.CODE_SUCCESS)

    def test_post_filter_cannot_help_and_says_what_did_not_fit(self) -> None:
        s = Session(pb, Limits())
        start(s, 8, [pod("w0", "2"), pod("w1", "2")])
        req = pb.PodGroupPostFilterRequest(
            pods=[pb.PodAttempt(uid="uid-w0", node="n1"), pb.PodAttempt(uid="uid-w1", message="0/2 nodes are available")],
        )
        r = ask(s, pb.Request(id=1, cycle_id=8, pod_group_post_filter=req))
        self.assertEqual(r.pod_group_post_filter.status.code, pb.CODE_UNSCHEDULABLE)
        self.assertEqual(
            list(r.pod_group_post_filter.status.reasons),
            ["gang-quota evicts nothing (1 pod(s) did not fit: 0/2 nodes are available)"],
        )
        self.assertEqual(len(r.pod_group_post_filter.nominations), 0)

    def test_a_request_of_an_unknown_or_ended_cycle_is_an_error(self) -> None:
        s = Session(pb, Limits())
        start(s, 9, [pod("w0", "1")])
        s.handle(pb.SchedulerMessage(cycle_end=pb.CycleEnd(cycle_id=9)))
        r = ask(s, pb.Request(id=1, cycle_id=9, group_permit=pb.GroupPermitRequest()))
        self.assertEqual(r.WhichOneof("result"), "error")
        self.assertIn("unknown group cycle 9", r.error.message)


if __name__ == "__main__":
    unittest.main()
