"""The §5.3 learning-rate schedule, fairseq's inverse_sqrt and warmup-then-constant, against their formulas."""

import math

import pytest
import torch

from aiayn_cli.training.schedule import (
    build_scheduler,
    constant_lrate,
    cooldown_factor,
    inverse_sqrt_lrate,
    noam_lrate,
)


def _lrs(scheduler, optimizer, steps):
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])  # the lr used by this update
        optimizer.step()
        scheduler.step()
    return lrs


def _optimizer():
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0, betas=(0.9, 0.98), eps=1e-9)


def test_noam_is_equation_3():
    optimizer = _optimizer()
    scheduler = build_scheduler(optimizer, "noam", d_model=512, warmup_steps=4000)
    lrs = _lrs(scheduler, optimizer, 10)
    for step_num, lr in enumerate(lrs, start=1):
        expected = 512**-0.5 * min(step_num**-0.5, step_num * 4000**-1.5)
        assert lr == pytest.approx(expected, rel=1e-12)
    # the paper's landmarks: linear warmup, peak at warmup_steps, inverse square root after
    assert noam_lrate(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert noam_lrate(2000, 512, 4000) == pytest.approx(noam_lrate(4000, 512, 4000) / 2)
    assert noam_lrate(16000, 512, 4000) == pytest.approx(noam_lrate(4000, 512, 4000) / 2)
    assert max(noam_lrate(s, 512, 4000) for s in range(1, 20000, 7)) <= noam_lrate(4000, 512, 4000) + 1e-15


def test_noam_scale_and_resume():
    optimizer = _optimizer()
    scheduler = build_scheduler(optimizer, "noam", d_model=256, warmup_steps=100, lr_scale=2.0)
    lrs = _lrs(scheduler, optimizer, 150)
    assert lrs[149] == pytest.approx(2.0 * 256**-0.5 * 150**-0.5)
    # a scheduler and optimizer restored from their state dicts continue at the same step
    optimizer2 = _optimizer()
    scheduler2 = build_scheduler(optimizer2, "noam", d_model=256, warmup_steps=100, lr_scale=2.0)
    optimizer2.load_state_dict(optimizer.state_dict())
    scheduler2.load_state_dict(scheduler.state_dict())
    assert _lrs(scheduler2, optimizer2, 3) == pytest.approx(_lrs(scheduler, optimizer, 3))


def test_inverse_sqrt_is_fairseqs_formula():
    optimizer = _optimizer()
    scheduler = build_scheduler(
        optimizer, "inverse_sqrt", d_model=512, warmup_steps=10, peak_lr=1e-3, warmup_init_lr=1e-7
    )
    lrs = _lrs(scheduler, optimizer, 40)
    for step_num, lr in enumerate(lrs, start=1):
        if step_num < 10:
            expected = 1e-7 + step_num * (1e-3 - 1e-7) / 10
        else:
            expected = 1e-3 * math.sqrt(10 / step_num)
        assert lr == pytest.approx(expected, rel=1e-12)
    assert inverse_sqrt_lrate(10, 1e-3, 10) == pytest.approx(1e-3)


def test_constant_warms_up_linearly_then_holds_its_peak():
    optimizer = _optimizer()
    scheduler = build_scheduler(optimizer, "constant", d_model=512, warmup_steps=8, peak_lr=2e-3, warmup_init_lr=0.0)
    lrs = _lrs(scheduler, optimizer, 30)
    assert lrs[:8] == pytest.approx([step_num * 2e-3 / 8 for step_num in range(1, 9)], rel=1e-12)
    assert lrs[7:] == [2e-3] * 23  # the peak from step warmup_steps on, with no decay
    assert constant_lrate(1, 2e-3, 8, warmup_init_lr=1e-4) == pytest.approx(1e-4 + (2e-3 - 1e-4) / 8)
    # resumed at step 20, it gives the lr of the 21st update
    resumed = _optimizer()
    build_scheduler(resumed, "constant", d_model=512, warmup_steps=8, peak_lr=2e-3, done_steps=20)
    assert resumed.param_groups[0]["lr"] == 2e-3


def test_rejects_unknown_schedule_and_base_lr():
    with pytest.raises(ValueError, match="unknown lr schedule"):
        build_scheduler(_optimizer(), "cosine", d_model=8, warmup_steps=1)
    bad = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="base lr"):
        build_scheduler(bad, "noam", d_model=8, warmup_steps=1)


def test_cooldown_falls_linearly_to_zero_over_the_last_fraction():
    assert [cooldown_factor(p, None) for p in (0.0, 0.9, 1.0)] == [1.0, 1.0, 1.0]  # the paper: none
    assert [cooldown_factor(p, 0.25) for p in (0.0, 0.5, 0.75)] == [1.0, 1.0, 1.0]
    assert cooldown_factor(0.875, 0.25) == pytest.approx(0.5)
    assert cooldown_factor(0.95, 0.25) == pytest.approx(0.2)
    assert cooldown_factor(1.0, 0.25) == 0.0 and cooldown_factor(1.3, 0.25) == 0.0  # past the budget
    assert cooldown_factor(0.0, 1.0) == 1.0 and cooldown_factor(0.5, 1.0) == pytest.approx(0.5)
