"""The pure symptom detectors, on recorded numbers from real runs and on shaped synthetic ones."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from lightning_order.checks.symptoms import (
    SYMPTOMS,
    Diagnosis,
    current_train_loss,
    detect_data_starvation,
    detect_early_oscillation,
    detect_input_shift,
    detect_memory_swing,
    detect_plateau,
    detect_rank_divergence,
    detect_train_val_gap,
    rank_input_shift,
)
from lightning_order.rules import RULES

# Recorded: the first 120 per-step train losses of a correct run (OrderedTextClassifier on the
# demo corpus, demo_size=2000, batch 32, seed 0). It drops steeply, with ordinary batch noise.
CORRECT_LOSSES = [
    1.414, 1.362, 1.347, 1.294, 1.275, 1.284, 1.296, 1.218, 1.261, 1.101, 1.15, 1.005, 1.06, 0.929,
    0.923, 1.034, 0.798, 0.802, 0.945, 0.681, 0.84, 0.53, 0.94, 0.505, 0.767, 0.719, 0.735, 0.659,
    0.581, 0.499, 0.602, 0.583, 0.728, 0.466, 0.66, 0.671, 0.517, 0.46, 0.418, 0.334, 0.284, 0.521,
    0.343, 0.339, 0.38, 0.315, 0.339, 0.342, 0.272, 0.252, 0.204, 0.256, 0.267, 0.328, 0.29, 0.16,
    0.109, 0.102, 0.152, 0.148, 0.146, 0.223, 0.152, 0.125, 0.069, 0.196, 0.115, 0.151, 0.193, 0.144,
    0.149, 0.104, 0.139, 0.123, 0.101, 0.033, 0.111, 0.217, 0.142, 0.036, 0.027, 0.141, 0.064, 0.119,
    0.098, 0.058, 0.048, 0.061, 0.05, 0.064, 0.028, 0.098, 0.09, 0.085, 0.064, 0.054, 0.049, 0.039,
    0.042, 0.05, 0.037, 0.058, 0.028, 0.045, 0.045, 0.027, 0.042, 0.053, 0.029, 0.05, 0.009, 0.038,
    0.039, 0.135, 0.009, 0.015, 0.03, 0.024, 0.034, 0.016,
]  # fmt: skip
# Recorded: the last 60 losses of the same run (converged: it stalls, but low).
CONVERGED_LOSSES = [
    0.034, 0.015, 0.012, 0.006, 0.003, 0.003, 0.001, 0.004, 0.003, 0.034, 0.006, 0.017, 0.012, 0.004,
    0.014, 0.006, 0.01, 0.005, 0.006, 0.004, 0.002, 0.008, 0.004, 0.005, 0.009, 0.005, 0.003, 0.005,
    0.011, 0.007, 0.003, 0.003, 0.004, 0.006, 0.005, 0.008, 0.012, 0.003, 0.002, 0.003, 0.009, 0.007,
    0.01, 0.011, 0.007, 0.018, 0.007, 0.0, 0.002, 0.003, 0.004, 0.006, 0.019, 0.005, 0.008, 0.002,
    0.004, 0.004, 0.004, 0.005,
]  # fmt: skip
# Recorded (same run): milliseconds waited for each batch, and each step's compute time.
CORRECT_TIMES_MS = [
    [11.82, 29.22], [11.59, 138.62], [8.13, 47.09], [10.81, 12.29], [10.65, 12.37], [7.56, 59.34],
    [1.97, 24.43], [14.52, 19.01], [1.94, 13.1], [15.08, 22.0], [1.97, 12.78], [9.74, 49.84],
    [10.51, 59.96], [2.15, 20.15], [2.25, 158.32], [2.36, 21.84], [18.49, 80.38], [13.7, 17.62],
    [11.41, 45.13], [11.47, 67.53], [11.66, 95.96], [23.62, 150.48], [2.25, 106.71], [11.73, 14.43],
    [11.53, 62.3], [11.18, 14.51], [11.55, 42.51], [11.19, 57.56], [11.39, 67.7], [11.59, 42.03],
]  # fmt: skip
# Recorded (same run): train loss near each validation (mean of the last 10 steps) and val loss.
CORRECT_EPOCH_TRAIN = [0.2481, 0.0467, 0.0225, 0.012, 0.0059]
CORRECT_EPOCH_VAL = [0.1955, 0.0839, 0.0698, 0.0584, 0.0470]

GIB = 2**30


def _steady_memory(n: int = 40, seed: int = 0) -> list[float]:
    """Shaped like torch.cuda.memory_allocated() at the end of each step of a steady run."""
    rng = random.Random(seed)
    return [1.5 * GIB + rng.randint(-4, 4) * 2**20 for _ in range(n)]


# -- the table and the record ---------------------------------------------------------------
@pytest.mark.parametrize("code", list(SYMPTOMS))
def test_symptom_table_names_real_rules(code: str) -> None:
    info = SYMPTOMS[code]
    # Loader and memory problems name no order error; the others name a real rule code.
    if code in ("data-starvation", "memory-swing"):
        assert info.suspected_rule is None and "not an order error" in info.explanation
    else:
        assert info.suspected_rule in RULES
    assert info.signal and info.explanation and info.fix


def test_diagnosis_validates_codes_and_round_trips() -> None:
    with pytest.raises(ValueError, match="unknown symptom"):
        Diagnosis("wobble", 1, "vocab-before-clean")
    with pytest.raises(ValueError, match="unknown rule"):
        Diagnosis("plateau", 1, "no-such-rule")
    diagnosis = Diagnosis("plateau", 12, "vocab-before-clean", {"unk_rate": 0.2}, "many unknown tokens")
    again = Diagnosis.from_dict(diagnosis.to_dict())
    assert again == diagnosis and again.evidence == {"unk_rate": 0.2}
    text = diagnosis.describe()
    assert "[plateau] at step 12" in text and "vocab-before-clean" in text and diagnosis.fix in text


# -- every detector: silent on correct numbers, fires on the symptom ------------------------
def _oscillating(n: int = 60) -> list[float]:
    return [2.0 - 0.01 * i + (0.9 if i % 2 else -0.9) for i in range(n)]


def _diverging_ranks() -> list[list[float]]:
    rng = random.Random(1)
    return [[0.7 + rng.gauss(0, 0.05) for _ in range(10)], [1.1 + rng.gauss(0, 0.05) for _ in range(10)]]


def _same_ranks(seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[0.7 + rng.gauss(0, 0.15) for _ in range(10)] for _ in range(4)]


CASES = {
    "early-oscillation": (
        lambda: detect_early_oscillation(_oscillating()),
        lambda: detect_early_oscillation(CORRECT_LOSSES),
    ),
    "plateau": (
        lambda: detect_plateau([1.39 + 0.01 * (i % 3) for i in range(160)]),
        lambda: detect_plateau(CORRECT_LOSSES),
    ),
    "rank-divergence": (
        lambda: detect_rank_divergence(_diverging_ranks()),
        lambda: detect_rank_divergence(_same_ranks(0)),
    ),
    "train-val-gap": (
        lambda: detect_train_val_gap([1.0, 0.4, 0.2], [0.9, 0.35, 0.15]),
        lambda: detect_train_val_gap(CORRECT_EPOCH_TRAIN, CORRECT_EPOCH_VAL),
    ),
    "data-starvation": (
        lambda: detect_data_starvation([0.06] * 30, [0.01] * 30),
        lambda: detect_data_starvation(
            [w / 1000 for w, _ in CORRECT_TIMES_MS], [s / 1000 for _, s in CORRECT_TIMES_MS]
        ),
    ),
    "memory-swing": (
        lambda: detect_memory_swing([(1.5 if i % 2 else 3.5) * GIB for i in range(40)]),
        lambda: detect_memory_swing(_steady_memory()),
    ),
}


@pytest.mark.parametrize("code", list(SYMPTOMS))
def test_detector_fires_on_symptom(code: str) -> None:
    diagnosis = CASES[code][0]()
    assert isinstance(diagnosis, Diagnosis)
    assert diagnosis.symptom == code
    assert diagnosis.suspected_rule is None or diagnosis.suspected_rule in RULES
    assert diagnosis.evidence and diagnosis.message
    # Every detector reports what it measured, the baseline it compared with, and the distance.
    assert {"statistic", "baseline", "distance"} <= set(diagnosis.evidence)


@pytest.mark.parametrize("code", list(SYMPTOMS))
def test_detector_silent_on_correct_run(code: str) -> None:
    assert CASES[code][1]() is None


# -- the edges of each decision -----------------------------------------------------------
def test_early_oscillation_needs_enough_steps_and_sign_flips() -> None:
    assert detect_early_oscillation(_oscillating(20)) is None  # under half the window judged
    # Large but one-directional drops (a fast, healthy start) are no oscillation.
    falling = [3.0 * 0.85**i for i in range(60)]
    assert detect_early_oscillation(falling, large_delta=0.05) is None
    diagnosis = detect_early_oscillation(_oscillating(), step=45)
    # One rank's curve cannot tell per-shard statistics from a high learning rate: no rule named.
    assert diagnosis.step == 45 and diagnosis.suspected_rule is None
    assert diagnosis.evidence["flip_ratio"] >= 0.5


def test_plateau_stall_is_flagged_only_when_high() -> None:
    assert detect_plateau(CONVERGED_LOSSES * 2, warmup_steps=20) is None  # converged: low start too
    stalled = [1.4 - 0.002 * min(i, 30) for i in range(160)]
    diagnosis = detect_plateau(stalled)
    assert diagnosis.evidence["trigger"] == "stall" and diagnosis.evidence["progress"] < 0.25
    # Not learning is reported as such: no order error named.
    assert diagnosis.suspected_rule is None and diagnosis.message.startswith("not learning")
    assert diagnosis.evidence["baseline"] == pytest.approx(1.4 - 0.002 * 9.5)
    assert detect_plateau(stalled[:130]) is None  # shorter than warm-up + window
    # An early plateau of 50 steps that then resolves (recorded shape) is no stall.
    paused = [1.40 - 0.003 * i for i in range(40)] + [1.27] * 50 + [1.27 - 0.008 * i for i in range(60)]
    assert detect_plateau(paused) is None


@pytest.mark.parametrize(("unk_rate", "fires"), [(None, False), (0.0, False), (0.001, False), (0.01, True)])
def test_plateau_unknown_token_rate(unk_rate: float | None, fires: bool) -> None:
    diagnosis = detect_plateau(CORRECT_LOSSES[:25], unk_rate=unk_rate)
    assert (diagnosis is not None) is fires
    if fires:
        assert diagnosis.evidence["trigger"] == "unk-rate"
        assert diagnosis.suspected_rule == "vocab-before-clean"


@pytest.mark.parametrize("seed", range(5))
def test_rank_divergence_silent_on_shared_noise(seed: int) -> None:
    assert detect_rank_divergence(_same_ranks(seed)) is None


@pytest.mark.parametrize(
    ("unk_rate", "baseline", "fires"), [(0.03, 0.03, False), (0.03, None, False), (0.034, 0.03, True)]
)
def test_plateau_unknown_tokens_against_the_vocabulary_baseline(unk_rate, baseline, fires) -> None:
    # A capped word-level vocabulary leaves 3% unknown tokens on its own train text: no fault.
    diagnosis = detect_plateau(CORRECT_LOSSES[:25], unk_rate=unk_rate, unk_baseline=baseline)
    assert (diagnosis is not None) is fires
    if fires:
        assert diagnosis.evidence["baseline"] == 0.03
        assert diagnosis.evidence["distance"] == pytest.approx(0.004)


def test_rank_divergence_names_the_rule_it_is_listed_under() -> None:
    diagnosis = detect_rank_divergence(_diverging_ranks())
    assert diagnosis.suspected_rule == SYMPTOMS["rank-divergence"].suspected_rule
    assert diagnosis.evidence["statistic"] > diagnosis.evidence["baseline"]


def _stats(mean: list[float], std: list[float]) -> dict[str, list[float]]:
    return {"mean": mean, "std": std}


def test_input_shift_compares_the_ranks_shares_of_one_validation_split() -> None:
    same = [_stats([0.05, -0.02], [1.02, 0.97]), _stats([-0.03, 0.04], [0.99, 1.05])]
    assert detect_input_shift(same) is None  # statistics fitted once: the shares look alike
    # Statistics fitted per shard (lab, seed 0): rank 0 maps the third source's rows far out.
    per_shard = [_stats([0.0, 3.0], [1.0, 6.0]), _stats([0.0, 0.1], [1.0, 1.1])]
    diagnosis = detect_input_shift(per_shard, step=50)
    assert diagnosis.symptom == "rank-divergence" and diagnosis.suspected_rule == "shard-before-normalize"
    assert diagnosis.evidence["trigger"] == "inputs" and diagnosis.evidence["column"] == 1
    assert diagnosis.evidence["ranks"] == [0, 1] and diagnosis.evidence["statistic"] > 2
    assert diagnosis.step == 50 and diagnosis.evidence["baseline"] == 0.0
    assert detect_input_shift(per_shard[:1]) is None  # one rank: nothing to compare
    # The same affine map on every rank changes nothing: only differences between ranks count.
    scaled = [_stats([10.0, 10.0], [5.0, 5.0]), _stats([10.1, 9.9], [5.1, 4.9])]
    assert detect_input_shift(scaled) is None


def test_rank_divergence_needs_relative_size_and_two_ranks() -> None:
    # 6 standard errors apart but only 1% of the loss: too small to be an order error.
    stable = [[1.00 + 0.0001 * (i % 2) for i in range(10)], [1.01 + 0.0001 * (i % 2) for i in range(10)]]
    assert detect_rank_divergence(stable) is None
    assert detect_rank_divergence([[0.5, 0.6, 0.7]]) is None
    summaries = [{"mean": 0.7, "std": 0.05, "count": 10}, {"mean": 1.1, "std": 0.05, "count": 10}]
    diagnosis = detect_rank_divergence(summaries, step=30)
    assert diagnosis.step == 30 and diagnosis.evidence["rank_means"] == [0.7, 1.1]


def test_train_val_gap_leakage_needs_learning() -> None:
    # A model that learned nothing has val == train on any split: no verdict.
    assert detect_train_val_gap([1.38, 1.37, 1.37], [1.36, 1.36, 1.35]) is None
    assert detect_train_val_gap([1.0, 0.4], [0.9, 0.35]) is None  # fewer than leak_epochs
    leak = detect_train_val_gap([1.0, 0.4, 0.2], [0.9, 0.35, 0.15])
    assert leak.evidence["kind"] == "leakage" and leak.suspected_rule == "train-val-overlap"


def test_train_val_gap_leakage_needs_a_shrinking_ratio() -> None:
    # An honest split on an easy task: val tracks train closely but the ratio does not keep
    # falling (recorded on a 1200-row demo run); rows copied from train pull ahead of it.
    honest = detect_train_val_gap([0.587, 0.127, 0.067], [0.518, 0.105, 0.059])
    assert honest is None
    leaky = detect_train_val_gap([0.60, 0.20, 0.10], [0.36, 0.09, 0.04])
    assert leaky is not None and leaky.evidence["ratios"] == pytest.approx([0.6, 0.45, 0.4])
    assert detect_train_val_gap([0.587, 0.127, 0.067], [0.518, 0.105, 0.059], require_shrinking_ratio=False)


def test_train_val_gap_overfitting_needs_absolute_gap() -> None:
    assert detect_train_val_gap([0.005], [0.05]) is None  # 10x, but 0.045 nats: a fine model
    diagnosis = detect_train_val_gap([0.1], [1.2])
    assert diagnosis.evidence["kind"] == "overfitting" and diagnosis.evidence["ratio"] == pytest.approx(12)
    # The rule the table lists for the symptom, not out-of-order.
    assert diagnosis.suspected_rule == "train-val-overlap" == SYMPTOMS["train-val-gap"].suspected_rule


def test_data_starvation_ignores_tiny_waits() -> None:
    assert detect_data_starvation([0.004] * 30, [0.001] * 30) is None  # 80% share, but 4 ms
    assert detect_data_starvation([0.06] * 10, [0.01] * 10) is None  # too few steps


def test_memory_swing_ignores_one_off_jump() -> None:
    readings = [1.0 * GIB] * 5 + [2.0 * GIB] * 35  # optimizer state appears once
    assert detect_memory_swing(readings) is None
    small = [(1.0 if i % 2 else 1.1) * 2**20 for i in range(40)]  # large share, tiny bytes
    assert detect_memory_swing(small) is None


@pytest.mark.parametrize(
    ("call", "arg"),
    [
        (lambda: detect_early_oscillation(CORRECT_LOSSES, window=0), "window"),
        (lambda: detect_plateau(CORRECT_LOSSES, max_unk_rate=0), "max_unk_rate"),
        (lambda: detect_rank_divergence(_same_ranks(0), z=-1), "z"),
        (lambda: detect_data_starvation([], [], max_wait_share=0), "max_wait_share"),
        (lambda: detect_memory_swing([], max_relative_swing=0), "max_relative_swing"),
        (lambda: detect_input_shift([], min_shift=0), "min_shift"),
    ],
)
def test_thresholds_are_checked(call, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        call()


def test_non_finite_values_are_ignored() -> None:
    losses = [float("nan")] * 10 + CORRECT_LOSSES
    assert detect_early_oscillation(losses, warmup_steps=15) is None
    assert detect_rank_divergence([[float("nan")] * 5, [0.5, 0.6]]) is None


def test_train_val_gap_memorisation_is_not_reported() -> None:
    # Recorded on the lab's correct target-encoding DDP run (seed 3): the validation loss climbs
    # back from its best while train keeps falling. Ordinary memorisation, no report.
    train = [1.05, 0.71, 0.55, 0.42, 0.35, 0.295]
    val = [1.02, 0.78, 0.72, 0.74, 0.84, 0.905]
    assert detect_train_val_gap(train, val) is None
    # The same gap held at the best validation loss: the splits differ.
    held = detect_train_val_gap(train, [1.02, 0.95, 0.93, 0.92, 0.91, 0.905])
    assert held.evidence["kind"] == "overfitting" and held.evidence["best_val"] == pytest.approx(0.905)
    assert detect_train_val_gap(train, val, max_val_rise=1.0) is not None


def test_plateau_calls_a_diverging_loss_not_learning_whatever_its_last_trend() -> None:
    # Recorded on Lightning's BoringModel (SGD at 0.1): from about 20 to thousands, swinging so
    # wildly that the last 60 steps can average below the 60 before them.
    start, older, recent = [20.0] * 20, [9000.0] * 60, [6000.0] * 60
    diagnosis = detect_plateau(start + older + recent)
    assert diagnosis.evidence["trigger"] == "stall" and diagnosis.evidence["diverging"]
    assert "300x its start (diverging)" in diagnosis.message and diagnosis.suspected_rule is None
    assert detect_plateau(start + older + recent, max_growth=1000.0) is None


# -- like with like: the train loss at the validation's step (issue 27) ---------------------
# Recorded at the three validations of a correct run of the issue's reproduction (demo_size 3000,
# batch 64, a mean-of-embeddings classifier, Adam 3e-3, init seed 1000): the mean of the last 10
# train losses, the train loss carried to the validation by the trend of the epoch's steps, the
# standard error of that estimate's logarithm, and the validation loss.
ISSUE_LAST10 = [1.2062, 0.857, 0.5286]
ISSUE_TRAIN = [1.1661, 0.8306, 0.4933]
ISSUE_SPREAD = [0.0051, 0.01, 0.0157]
ISSUE_VAL = [1.15, 0.7928, 0.4679]
# The last epoch's 43 losses of that run (falling fast: their mean lags 7 % behind the model).
ISSUE_EPOCH = [
    0.807, 0.787, 0.804, 0.754, 0.824, 0.735, 0.723, 0.752, 0.743, 0.679, 0.756, 0.754, 0.683, 0.652,
    0.674, 0.744, 0.669, 0.645, 0.659, 0.658, 0.632, 0.627, 0.64, 0.605, 0.62, 0.63, 0.532, 0.63,
    0.594, 0.601, 0.52, 0.542, 0.564, 0.589, 0.518, 0.532, 0.515, 0.563, 0.467, 0.516, 0.557, 0.499,
    0.53,
]  # fmt: skip
# Recorded the same way on a leak: 200 validation rows trained on four times per epoch
# (duplicates on both sides of the split), OrderedTextClassifier, 3 epochs.
REPEATED_TRAIN = [0.4353, 0.0886, 0.0312]
REPEATED_SPREAD = [0.0475, 0.0899, 0.1836]
REPEATED_VAL = [0.3683, 0.0591, 0.0141]


def test_the_train_loss_at_a_validation_is_the_trend_carried_to_its_step() -> None:
    loss, spread = current_train_loss(ISSUE_EPOCH)
    assert loss == pytest.approx(ISSUE_TRAIN[-1], abs=1e-3) and spread == pytest.approx(0.0157, abs=1e-3)
    assert loss < sum(ISSUE_EPOCH[-10:]) / 10  # the mean of the last steps lags behind
    geometric = [2.0 * 0.9**i for i in range(20)]
    assert current_train_loss(geometric)[0] == pytest.approx(2.0 * 0.9**20)
    assert current_train_loss(geometric)[1] == pytest.approx(0.0, abs=1e-9)
    assert current_train_loss([0.5, 0.4])[1] == math.inf  # too few to know its spread
    assert current_train_loss([float("nan")]) is None
    assert current_train_loss([0.2, -0.1, 0.0, -0.2])[0] == pytest.approx(-0.3)  # not all positive


def test_a_correct_run_still_learning_fast_is_no_leak() -> None:
    # The issue's reproduction: against the lagging mean its validation loss sat below "train"
    # at every validation, the ratio falling: the old statistic called it leakage.
    assert detect_train_val_gap(ISSUE_LAST10, ISSUE_VAL, leak_margin=0.0) is not None
    assert detect_train_val_gap(ISSUE_TRAIN, ISSUE_VAL, train_spread=ISSUE_SPREAD) is None


def test_validation_rows_trained_on_more_than_train_rows_read_as_leakage() -> None:
    diagnosis = detect_train_val_gap(REPEATED_TRAIN, REPEATED_VAL, train_spread=REPEATED_SPREAD)
    assert diagnosis.evidence["kind"] == "leakage" and diagnosis.evidence["z"] > 2
    assert diagnosis.evidence["ratios"] == pytest.approx([0.846, 0.667, 0.452], abs=1e-3)
    # The run's own spread: the same numbers from a noisier run are no verdict.
    noisy = [4 * s for s in REPEATED_SPREAD]
    assert detect_train_val_gap(REPEATED_TRAIN, REPEATED_VAL, train_spread=noisy) is None
    # Too few steps to know the spread (inf): no verdict either.
    assert detect_train_val_gap(REPEATED_TRAIN, REPEATED_VAL, train_spread=[math.inf] * 3) is None


def test_leak_margin_is_checked() -> None:
    with pytest.raises(ValueError, match="leak_margin"):
        detect_train_val_gap([1.0], [1.0], leak_margin=-1.0)


def test_the_ratio_may_rise_back_within_the_noise_of_a_loss_near_zero() -> None:
    # Recorded (tests/integration/test_symptom_monitor.py, leaky, seed 0): validation half of train
    # at every validation; near convergence the third ratio rises, within its estimate's noise.
    train, val, spread = [0.24601, 0.041665, 0.0096248], [0.1279, 0.01462, 0.005684], [0.057, 0.153, 0.238]
    assert detect_train_val_gap(train, val, train_spread=spread) is not None
    assert detect_train_val_gap(train, val, train_spread=[0.057, 0.05, 0.05]) is None  # a real rise
    # A constant offset (dropout's) never pulls ahead: no verdict however far below train.
    assert detect_train_val_gap([1.0, 0.5, 0.25], [0.7, 0.35, 0.175], train_spread=[0.01] * 3) is None


def _shares(columns: np.ndarray, ranks: int = 2) -> list[dict[str, list[float]]]:
    """Each rank's interleaved share of one validation split (Lightning's sampler), summarised."""
    out = []
    for r in range(ranks):
        part = columns[r::ranks]
        centred = part - part.mean(0)
        fourth = (centred**4).mean(0) / part.var(0) ** 2
        out.append(
            {
                "mean": part.mean(0).tolist(),
                "std": part.std(0).tolist(),
                "count": [float(len(part))] * part.shape[1],
                "kurtosis": fourth.tolist(),
            }
        )
    return out


def test_a_heavy_tailed_raw_column_strays_between_shares_without_a_symptom() -> None:
    # label_ddp's validation split: 312 rows, a raw word count per docstring (heavy-tailed). Two
    # interleaved shares of it differ by half a standard deviation by chance; no rank normalised.
    rng = np.random.default_rng(3)
    words = np.exp(rng.normal(3.6, 0.9, size=(312, 1)))
    words[7] = 2000.0  # one long docstring lands on rank 1's share
    shares = _shares(words)
    assert rank_input_shift(shares)[0] > 0.5  # the old test alone would name per-shard statistics
    assert detect_input_shift(shares) is None
    # Standardised per shard of drifting data (shard means 0 and 1.5), the rows move by many
    # standard errors: rank 0's share through its own statistics, rank 1's through its own.
    val = rng.normal(0.75, 1.0, size=(312, 1))
    per_shard = _shares(np.where(np.arange(312)[:, None] % 2 == 0, val, val - 1.5))
    found = detect_input_shift(per_shard)
    assert found is not None and found.evidence["min_z"] == 5.0 and found.evidence["column"] == 0
