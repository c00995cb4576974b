"""Groupings route as Storm's do: fair shuffle, stable fields hashing, partial key, all, global, direct,
local-or-shuffle, custom."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from squall.core.thrift import storm
from worker.grouping import GroupingError, custom_grouping_spec, make_grouper

TARGETS = [7, 3, 5]
NULL = storm.NullStruct()


def grouper(grouping: storm.Grouping, **kw):
    kw.setdefault("output_fields", ["word", "count"])
    kw.setdefault("targets", TARGETS)
    return make_grouper(grouping, **kw)


def test_shuffle_over_two_tasks_is_fair() -> None:
    g = grouper(storm.Grouping(shuffle=NULL), targets=[1, 2])
    counts = Counter(t for _ in range(100_000) for t in g(("x", 1)))
    assert 49_000 <= counts[1] <= 51_000 and counts[1] + counts[2] == 100_000


def test_shuffle_dealing_a_batch_at_once_stays_exactly_fair_with_single_rows() -> None:
    g = grouper(storm.Grouping(shuffle=NULL))
    counts: Counter[int] = Counter()
    for n in [1, 5, 3, 0, 7, 2, 100, 1, 1, 4] * 20:
        for (task,), rows in g.split(n):  # what an emit_many of n rows deals
            counts[task] += rows
        counts[g(("x", 1))[0]] += 1      # and one emit
        assert max(counts.values()) - min(counts[t] for t in TARGETS) <= 1


def test_shuffle_order_varies_between_sources() -> None:
    firsts = {grouper(storm.Grouping(shuffle=NULL), seed=seed)(()) for seed in range(20)}
    assert len(firsts) > 1


def test_fields_sends_a_key_to_one_task_and_spreads_keys() -> None:
    g = grouper(storm.Grouping(fields=["word"]))
    for word in ("apple", "pear", "fig"):
        assert len({g((word, n))[0] for n in range(50)}) == 1
    assert len({g((f"w{i}", 0))[0] for i in range(300)}) == 3


def test_fields_hash_is_the_same_in_every_process() -> None:
    """Python's hash() is randomised per process; ours must not be."""
    code = ("from squall.core.thrift import storm; from worker.grouping import make_grouper;"
            "g = make_grouper(storm.Grouping(fields=['word', 'count']), output_fields=['word', 'count'], targets=[7, 3, 5]);"
            "print([g((f'w{i}', i))[0] for i in range(40)])")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)}
    assert len(runs) == 1
    here = grouper(storm.Grouping(fields=["word", "count"]))
    assert runs == {str([here((f"w{i}", i))[0] for i in range(40)]) + "\n"}


def candidates(key: str, **kw) -> list[int]:
    """A key's two partial-key tasks, in order: a fresh emitter sends it to the first, then the second."""
    g = grouper(storm.Grouping(partial_key=["word"]), **kw)
    return [g((key, 0))[0], g((key, 0))[0]]


def test_partial_key_spreads_a_hot_key_evenly_over_exactly_two_tasks() -> None:
    g = grouper(storm.Grouping(partial_key=["word"]), targets=[1, 2, 3, 4, 5])
    counts = Counter(t for n in range(10_001) for t in g(("hot", n)))
    assert len(counts) == 2 and sorted(counts.values()) == [5_000, 5_001]


def test_partial_key_candidates_are_two_tasks_fixed_per_key_and_spread_over_all_tasks() -> None:
    targets = [1, 2, 3, 4, 5]
    pairs = {f"w{i}": candidates(f"w{i}", targets=targets) for i in range(300)}
    fields = grouper(storm.Grouping(fields=["word"]), targets=targets)
    for key, (first, second) in pairs.items():
        assert first != second and candidates(key, targets=targets, seed=9) == [first, second]
        assert [first] == list(fields((key, 0))), "the first candidate is the task fields grouping picks"
    assert {t for pair in pairs.values() for t in pair} == set(targets)
    assert len({tuple(sorted(pair)) for pair in pairs.values()}) == 10, "every pair of 5 tasks is some key's pair"


def test_partial_key_candidates_are_the_same_in_every_process() -> None:
    code = ("from squall.core.thrift import storm; from worker.grouping import make_grouper;"
            "gs = [make_grouper(storm.Grouping(partial_key=['word']), output_fields=['word', 'count'], "
            "targets=[7, 3, 5]) for _ in range(40)];"
            "print([[g((f'w{i}', 0))[0], g((f'w{i}', 0))[0]] for i, g in enumerate(gs)])")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)}
    assert runs == {str([candidates(f"w{i}") for i in range(40)]) + "\n"}


def test_partial_key_sends_to_the_candidate_this_emitter_loaded_less() -> None:
    """Keys sharing a task: once one key's traffic loads the shared task, another key whose first candidate
    it is goes to its second; another emitter, with its own counts, still starts on the first."""
    targets = list(range(1, 9))
    pairs = {f"w{i}": candidates(f"w{i}", targets=targets) for i in range(200)}
    hot, (shared, _) = next(iter(pairs.items()))
    other, (_, elsewhere) = next((k, p) for k, p in pairs.items() if p[0] == shared and p[1] not in pairs[hot])
    emitter = grouper(storm.Grouping(partial_key=["word"]), targets=targets, seed=1)
    for n in range(5):
        emitter((hot, n))                               # the shared task gets 3, the other candidate 2
    assert list(emitter((other, 0))) == [elsewhere], "the shared task is busier: the second candidate"
    fresh = grouper(storm.Grouping(partial_key=["word"]), targets=targets, seed=2)
    assert list(fresh((other, 0))) == [shared], "load counts are per emitter"


def test_partial_key_with_several_fields_and_one_target() -> None:
    g = grouper(storm.Grouping(partial_key=["word", "count"]))
    assert len({g(("a", 1))[0] for _ in range(10)}) == 2 and len({g(("a", 2))[0] for _ in range(10)}) == 2
    assert list(grouper(storm.Grouping(partial_key=["word"]), targets=[4])(("a", 1))) == [4]


def test_all_global_direct() -> None:
    assert sorted(grouper(storm.Grouping(all=NULL))(())) == [3, 5, 7]
    assert list(grouper(storm.Grouping(fields=[]))(())) == [3], "global: the lowest task id"
    assert list(grouper(storm.Grouping(direct=NULL))(())) == [], "direct: the emitter names the task"


def test_local_or_shuffle_prefers_tasks_in_this_worker() -> None:
    g = grouper(storm.Grouping(local_or_shuffle=NULL), local=frozenset({5}))
    assert {g(())[0] for _ in range(20)} == {5}
    remote_only = grouper(storm.Grouping(local_or_shuffle=NULL), local=frozenset())
    assert {remote_only(())[0] for _ in range(30)} == {3, 5, 7}


class EvenOdd:
    """A custom grouping for the test: even counts to the first task, odd to the last."""

    def prepare(self, output_fields, targets):
        self.first, self.last = targets[0], targets[-1]

    def choose_tasks(self, values):
        return [self.first if values[1] % 2 == 0 else self.last]


def test_custom_grouping_is_a_python_class_named_in_json() -> None:
    g = grouper(storm.Grouping(custom_serialized=custom_grouping_spec(__name__, "EvenOdd")))
    assert (list(g(("a", 2))), list(g(("a", 3)))) == ([3], [7])


def test_bad_subscriptions_are_refused() -> None:
    with pytest.raises(GroupingError, match=r"fields grouping on \['lang'\]"):
        grouper(storm.Grouping(fields=["lang"]))
    with pytest.raises(GroupingError, match=r"partial_key grouping on \['word', 'lang'\] but the stream declares"):
        grouper(storm.Grouping(partial_key=["word", "lang"]))
    with pytest.raises(GroupingError, match="partial_key grouping names no fields"):
        grouper(storm.Grouping(partial_key=[]))
    with pytest.raises(GroupingError, match="cannot load custom grouping"):
        grouper(storm.Grouping(custom_serialized=b"\x80\x04pickle"))
    with pytest.raises(GroupingError, match="Java custom_object"):
        grouper(storm.Grouping(custom_object=storm.JavaObject("a.B", [])))


@pytest.mark.parametrize("module, name, what", [
    ("os", "system", "a builtin function"),
    ("subprocess", "Popen", "the class subprocess.Popen"),
])
def test_a_custom_grouping_naming_anything_but_a_grouping_class_is_never_called(tmp_path, module, name, what) -> None:
    """The JSON of a custom grouping names a callable that is not a grouping class (``os.system`` with a command,
    ``subprocess.Popen`` with an argv): refused with the reason, and the callable was not called."""
    proof = tmp_path / "proof"
    args = f"touch {proof}" if name == "system" else ["touch", str(proof)]
    with pytest.raises(GroupingError, match=f"names {module}.{name}, {what}, not a class with a choose_tasks"):
        grouper(storm.Grouping(custom_serialized=custom_grouping_spec(module, name, args)))
    assert not proof.exists()
