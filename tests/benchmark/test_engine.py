from __future__ import annotations

import numpy as np
import pytest

from benchmark.datasets import SampleKey
from benchmark.engine import (
    EngineConfig,
    EngineError,
    InstanceResult,
    RunSpec,
    clear_embedding_cache,
    evaluate_instance,
    instance_file_name,
    load_results,
    run_local,
)


@pytest.fixture(autouse=True)
def _fresh_embedding_cache():
    # Encode counts below are per test: start each from an empty per-process cache.
    clear_embedding_cache()


class CountingUniformMap:
    def __init__(self):
        self.calls = 0

    def __call__(self, image, gt, error):
        self.calls += 1
        return error.astype(float)


def _config(**kw):
    kw.setdefault("max_clicks", 3)
    kw.setdefault("group_bounds", ((0.0, 0.5), (0.5, 1.0)))
    return EngineConfig(**kw)


def test_one_encode_per_image_and_one_round1_map_for_all_groups(tiny_dataset, disk_predictor):
    sample = tiny_dataset.samples[0]
    map_fn = CountingUniformMap()
    real = np.array([[5.0, 6.0], [6.0, 7.0]])
    result = evaluate_instance(predictor=disk_predictor, sample=sample, config=_config(samples_per_group=2),
                               method="disk", map_fn=map_fn, real_clicks_xy=real)  # fmt: skip
    assert disk_predictor.encode_calls == 1
    # base 3 + groups 2x2x3 + user 2 + sample 2
    assert disk_predictor.predict_calls == 3 + 12 + 2 + 2
    # round 1 once; later rounds once per (group, sample, round) at most
    assert 1 <= map_fn.calls <= 1 + 2 * 2 * 2
    assert result.base_iou.shape == (3,) and result.group_iou.shape == (2, 2, 3)
    assert result.user_iou.shape == (2,) and result.sample_iou.shape == (2,)
    assert np.all((result.group_iou >= 0) & (result.group_iou <= 1))


def test_reencoding_per_click_changes_speed_not_numbers(tiny_dataset, predictor_factory):
    sample = tiny_dataset.samples[0]
    reused, reencoded = predictor_factory(), predictor_factory()
    a = evaluate_instance(
        predictor=reused, sample=sample, config=_config(), method="disk", map_fn=CountingUniformMap()
    )
    b = evaluate_instance(predictor=reencoded, sample=sample, config=_config(reencode_per_click=True), method="disk",
                          map_fn=CountingUniformMap())  # fmt: skip
    np.testing.assert_array_equal(a.group_iou, b.group_iou)
    np.testing.assert_array_equal(a.base_clicks, b.base_clicks)
    assert reused.encode_calls == 1
    assert reencoded.encode_calls == 1 + reencoded.predict_calls


def test_resume_loads_saved_instances_and_recomputes_on_config_change(tiny_dataset, disk_predictor, tmp_path):
    sample = tiny_dataset.samples[1]
    first = evaluate_instance(predictor=disk_predictor, sample=sample, config=_config(), method="disk",
                              map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    calls = disk_predictor.predict_calls
    again = evaluate_instance(predictor=disk_predictor, sample=sample, config=_config(), method="disk",
                              map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    assert disk_predictor.predict_calls == calls
    np.testing.assert_array_equal(again.group_iou, first.group_iou)
    assert again.key == sample.key
    evaluate_instance(predictor=disk_predictor, sample=sample, config=_config(seed=1), method="disk",
                      map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    assert disk_predictor.predict_calls > calls
    (loaded,) = load_results(tmp_path)
    assert loaded.key == SampleKey("GrabCut", "right", "")


def test_instance_files_record_the_checkpoint_and_another_checkpoint_is_recomputed(
    tiny_dataset, predictor_factory, tmp_path
):
    """#15.6: the masks' weights are part of a result's identity (same model id, other weights: recompute)."""

    class Weighted(predictor_factory):
        def __init__(self, digest):
            super().__init__()
            self.digest = digest

        @property
        def checkpoint_hash(self):
            return self.digest

    sample = tiny_dataset.samples[0]
    first = Weighted("a" * 64)
    result = evaluate_instance(predictor=first, sample=sample, config=_config(), method="disk",
                               map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    assert result.checkpoint_sha256 == "a" * 64
    (loaded,) = load_results(tmp_path)
    assert (loaded.model_id, loaded.checkpoint_sha256) == (first.model_id, "a" * 64)
    same = Weighted("a" * 64)
    evaluate_instance(predictor=same, sample=sample, config=_config(), method="disk",
                      map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    assert same.predict_calls == 0  # resumed from the file
    other = Weighted("b" * 64)
    evaluate_instance(predictor=other, sample=sample, config=_config(), method="disk",
                      map_fn=CountingUniformMap(), out_dir=tmp_path)  # fmt: skip
    assert other.predict_calls > 0
    assert load_results(tmp_path)[0].checkpoint_sha256 == "b" * 64


def test_instance_file_names_are_distinct_for_tricky_keys():
    keys = [
        SampleKey("TETRIS", "a--b", ""),
        SampleKey("TETRIS", "a", "-b"),
        SampleKey("TETRIS", "a b.c", "1"),
        SampleKey("TETRIS", "a b", "c.1"),
    ]
    names = [instance_file_name(k) for k in keys]
    assert len(set(names)) == len(names) and all("/" not in n for n in names)


def test_independent_streams_vs_common_random_numbers(tiny_dataset, disk_predictor):
    sample = tiny_dataset.samples[1]
    same_bounds = ((0.0, 1.0), (0.0, 1.0))
    independent = evaluate_instance(predictor=disk_predictor, sample=sample, method="disk",
                                    config=_config(group_bounds=same_bounds), map_fn=CountingUniformMap())  # fmt: skip
    common = evaluate_instance(predictor=disk_predictor, sample=sample, method="disk",
                               config=_config(group_bounds=same_bounds, common_random_numbers=True),
                               map_fn=CountingUniformMap())  # fmt: skip
    np.testing.assert_array_equal(common.group_clicks[0], common.group_clicks[1])
    assert not np.array_equal(independent.group_clicks[0], independent.group_clicks[1])


def test_config_validation():
    with pytest.raises(EngineError, match="samples_per_group=0"):
        EngineConfig(samples_per_group=0)
    with pytest.raises(EngineError, match=r"clicking group \(0.5, 0.2\)"):
        EngineConfig(group_bounds=((0.5, 0.2),))


def test_local_fan_out_over_processes_matches_in_process_run(tiny_dataset, tmp_path):
    def spec(out):
        return RunSpec(method="embedded", predictor_options={}, click_model="uniform",
                       config=_config(max_clicks=2), out_dir=str(out))  # fmt: skip

    done = []
    run_local(spec=spec(tmp_path / "one"), samples=tiny_dataset.samples, real_clicks={}, workers=1)
    run_local(spec=spec(tmp_path / "two"), samples=tiny_dataset.samples, real_clicks={}, workers=2,
              progress=done.append)  # fmt: skip
    assert sum(done) == 2
    one, two = load_results(tmp_path / "one"), load_results(tmp_path / "two")
    assert [r.key for r in one] == [r.key for r in two] == sorted(s.key for s in tiny_dataset.samples)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a.base_iou, b.base_iou)
        np.testing.assert_array_equal(a.group_clicks, b.group_clicks)
        assert isinstance(a, InstanceResult) and a.method == "embedded"
