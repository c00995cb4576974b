"""Gray upgrade decisions on plain values: refusals, batch choice, completion, rollback and expiry."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nimbus import upgrade
from nimbus.upgrade import BatchRequest, Step, UpgradeRefused, UpgradeView
from squall.api.dsl import Topology
from squall.core.config.keys import default_config
from squall.core.topology import normalize, system_topology
from squall.core.zk.records import GrayUpgradeConf
from topologies import Forward, Numbers, Recorder

NOW = 1_700_000_000_000
TTL = 60_000
#: Batch order: host:port, the topology master's worker ("h:4") last.
WORKERS = ("h:1", "h:2", "h:3", "h:4")
HOSTING = {"tag": frozenset({"h:2", "h:3"}), "__topology_master": frozenset({"h:4"})}


def started(request: BatchRequest = BatchRequest(worker_num=1)) -> GrayUpgradeConf:
    return upgrade.start(None, "wc", request, version=2, now_ms=NOW, ttl_ms=TTL)


def view(conf: GrayUpgradeConf, upgrading: set[str] = set(), upgraded: set[str] = set(),
         workers: tuple[str, ...] = WORKERS) -> UpgradeView:
    return UpgradeView(conf, workers, HOSTING, frozenset(upgrading), frozenset(upgraded))


def test_batches_by_count_follow_the_operator_and_complete_when_every_worker_runs_the_new_code() -> None:
    conf = started()
    assert (conf.version, conf.expire_ms, conf.continue_upgrade) == (2, NOW + TTL, True)
    step = upgrade.next_step(view(conf), NOW)
    assert step.batch == ("h:1",) and step.conf == replace(conf, continue_upgrade=False)
    conf = step.conf
    assert upgrade.next_step(view(conf, upgrading={"h:1"}), NOW) == Step(), "waits for the batch"
    assert upgrade.next_step(view(conf, upgraded={"h:1"}), NOW) == Step(), "waits for the operator"
    conf = upgrade.next_batch(conf, "wc", BatchRequest(worker_num=2), now_ms=NOW)
    assert upgrade.next_step(view(conf, upgrading={"h:1"}), NOW) == Step(), "the next batch waits for the last"
    step = upgrade.next_step(view(conf, upgraded={"h:1"}), NOW)
    assert step.batch == ("h:2", "h:3")
    conf = upgrade.next_batch(step.conf, "wc", BatchRequest(worker_num=5), now_ms=NOW)
    assert upgrade.next_step(view(conf, upgraded={"h:1", "h:2", "h:3"}), NOW).batch == ("h:4",), \
        "the topology master's worker goes last"
    assert upgrade.next_step(view(conf, upgraded=set(WORKERS)), NOW) == Step(complete=True)
    done = upgrade.ended(conf, NOW + 5)
    assert upgrade.next_step(view(done, upgraded=set(WORKERS)), NOW) == Step()


def test_explicit_workers_beat_a_component_which_beats_a_count() -> None:
    remaining = ["h:1", "h:2", "h:3", "h:4"]
    pick = lambda request: upgrade.pick(started(request), remaining, HOSTING)  # noqa: E731
    assert pick(BatchRequest(worker_num=3, component="tag", workers=("h:4", "h:1"))) == ("h:4", "h:1")
    assert pick(BatchRequest(worker_num=0, component="tag")) == ("h:2", "h:3"), "0 with a component: all of them"
    assert pick(BatchRequest(worker_num=1, component="tag")) == ("h:2",)
    assert pick(BatchRequest(component="__topology_master")) == ("h:4",), "named explicitly, the master's worker too"
    assert pick(BatchRequest(all_remaining=True)) == tuple(remaining)
    assert upgrade.pick(started(BatchRequest(component="tag")), ["h:1", "h:3"], HOSTING) == ("h:3",), \
        "already upgraded workers are not picked again"


def test_an_upgrade_started_without_a_batch_waits_for_the_first_request() -> None:
    conf = started(BatchRequest())
    assert not conf.continue_upgrade and upgrade.next_step(view(conf), NOW) == Step()


def test_a_second_upgrade_is_refused_while_one_is_open_and_allowed_after_it_ended() -> None:
    conf = started()
    with pytest.raises(UpgradeRefused, match="a gray upgrade of 'wc' is in progress; finish it first"):
        upgrade.start(conf, "wc", BatchRequest(worker_num=1), version=3, now_ms=NOW, ttl_ms=TTL)
    rolling = upgrade.start_rollback(conf, "asked by the operator")
    with pytest.raises(UpgradeRefused, match="is rolling back"):
        upgrade.start(rolling, "wc", BatchRequest(worker_num=1), version=3, now_ms=NOW, ttl_ms=TTL)
    again = upgrade.start(upgrade.ended(rolling, NOW), "wc", BatchRequest(worker_num=1), version=3, now_ms=NOW,
                          ttl_ms=TTL)
    assert again.version == 3 and not again.rollback and not again.complete_ms


def test_continuing_what_cannot_continue_says_why() -> None:
    request = BatchRequest(worker_num=1)
    cases = [
        (None, "'wc' has no gray upgrade; start one"),
        (upgrade.ended(started(), NOW), "to code version 2 is already complete"),
        (upgrade.ended(upgrade.start_rollback(started(), "tasks died"), NOW), r"was rolled back \(tasks died\)"),
        (upgrade.start_rollback(started(), "asked by the operator"), "is rolling back"),
    ]
    for conf, message in cases:
        with pytest.raises(UpgradeRefused, match=message):
            upgrade.next_batch(conf, "wc", request, now_ms=NOW)
    with pytest.raises(UpgradeRefused, match=r"expired 1s ago \(topology.upgrade.ttl\)"):
        upgrade.next_batch(started(), "wc", request, now_ms=NOW + TTL + 1000)


def test_expiry_rolls_back_and_a_rollback_ends_once_no_switched_worker_is_pending() -> None:
    conf = upgrade.next_step(view(started()), NOW).conf
    assert upgrade.next_step(view(conf, upgraded={"h:1"}), NOW + TTL + 1) == Step(
        rollback="it expired: not completed within topology.upgrade.ttl")
    rolling = upgrade.start_rollback(conf, "it expired")
    assert upgrade.next_step(view(rolling, upgraded={"h:1"}), NOW) == Step(back=("h:1",)), \
        "upgraded workers are switched back (also one a supervisor confirmed as the rollback began)"
    assert upgrade.next_step(view(rolling, upgrading={"h:1"}), NOW) == Step()
    assert upgrade.next_step(view(rolling, upgrading={"h:9"}), NOW) == Step(rolled_back=True), \
        "a mark of a worker no longer assigned does not hold the rollback"
    assert upgrade.next_step(view(rolling), NOW + TTL * 2) == Step(rolled_back=True)


def test_requests_naming_unknown_workers_or_components_are_refused_with_what_exists() -> None:
    upgrade.check_request(BatchRequest(workers=("h:1",), component="tag"), WORKERS, ["tag"])
    with pytest.raises(UpgradeRefused, match=r"not workers of this topology: \['h:9'\]; its workers are"):
        upgrade.check_request(BatchRequest(workers=("h:9",)), WORKERS, ["tag"])
    with pytest.raises(UpgradeRefused, match=r"unknown component 'tga'; components are \['tag'\]"):
        upgrade.check_request(BatchRequest(component="tga"), WORKERS, ["tag"])


def shape_of(topology: Topology) -> dict:
    thrift, conf = topology.build()
    normalized, conf = normalize(thrift, conf, name=topology.name)
    return upgrade.shape(system_topology(normalized, {**default_config(), **conf}))


def wordcount(parallelism: int = 2, grouping: str = "shuffle", extra: bool = False) -> Topology:
    t = Topology("wc")
    numbers = t.spout("numbers", Numbers, args=[10])
    forward = t.bolt("forward", Forward, parallelism=parallelism)
    forward.fields(numbers, "key") if grouping == "fields" else forward.shuffle(numbers)
    t.bolt("sink", Recorder, args=["/tmp/x"]).shuffle(forward)
    if extra:
        t.bolt("extra", Forward).shuffle(numbers)
    return t


def test_the_shape_check_names_what_changed() -> None:
    same = upgrade.shape_differences(shape_of(wordcount()), shape_of(wordcount()))
    assert same == []
    changed = upgrade.shape_differences(shape_of(wordcount()), shape_of(wordcount(3, "fields")))
    assert "component 'forward': task count 2 → 3" in changed
    assert "component 'forward': inputs {'numbers:default': 'shuffle'} → {'numbers:default': \"fields ['key']\"}" \
        in changed
    added = upgrade.shape_differences(shape_of(wordcount()), shape_of(wordcount(extra=True)))
    assert added[0] == "component 'extra' was added"
