"""Pure detectors that read order errors off training signals (the troubleshooting guide, as code).

Some order errors only show while training, and users also run pipelines we did not build. Each
detector takes plain numbers (losses, per-rank means, input statistics, timings, memory
readings), compares them with the run's own baseline (its first window, its other ranks, its
train split) and returns a :class:`Diagnosis` with the statistic, the baseline and how far apart
they are, or ``None``. :func:`attribute` then names the order error the run's facts point to
(the validator's ledger, whether the data keeps a vocabulary), or none.

Trade-off: every detector answers "is this far outside what a correct run shows?", so each has a
threshold and a warm-up, chosen so that correct runs give *no* diagnosis (a false alarm costs a
user's trust more than a late one); every threshold is an argument (calibration figures in
``docs/troubleshooting.md``).

Modules, one per detector family: :mod:`.table` (the diagnosis table and the record),
:mod:`.loss` (one rank's curve), :mod:`.ranks` (ranks against each other),
:mod:`.generalisation` (train against validation), :mod:`.resources` (loader and memory),
:mod:`.attribution` (from symptom to cause, never to a cause the evidence excludes),
:mod:`.evidence` (what a ledger proves about the leakage rules), :mod:`.guards` (what every detector does to its
inputs first). Nothing here touches a Trainer, a GPU or a process group.
"""

from lightning_order.checks.symptoms.attribution import RunFacts, attribute, ruled_out
from lightning_order.checks.symptoms.evidence import LedgerProof, ledger_proof
from lightning_order.checks.symptoms.generalisation import (
    current_train_loss,
    detect_label_leak,
    detect_train_val_gap,
)
from lightning_order.checks.symptoms.loss import detect_early_oscillation, detect_plateau
from lightning_order.checks.symptoms.ranks import detect_input_shift, detect_rank_divergence, rank_input_shift
from lightning_order.checks.symptoms.resources import detect_data_starvation, detect_memory_swing
from lightning_order.checks.symptoms.table import SYMPTOMS, Diagnosis, SymptomInfo

__all__ = [
    "SYMPTOMS",
    "Diagnosis",
    "LedgerProof",
    "RunFacts",
    "SymptomInfo",
    "attribute",
    "current_train_loss",
    "detect_data_starvation",
    "detect_early_oscillation",
    "detect_input_shift",
    "detect_label_leak",
    "detect_memory_swing",
    "detect_plateau",
    "detect_rank_divergence",
    "detect_train_val_gap",
    "ledger_proof",
    "rank_input_shift",
    "ruled_out",
]
