"""HF's Trainer trains a model switched by ``use_ranking_loss`` unchanged (it needs ``accelerate``)."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import torch
from transformers import Trainer, TrainingArguments

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss

from .tiny_detrs import fixed_batch, tiny_detr


def collate(examples: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {
        "pixel_values": torch.stack([example["pixel_values"] for example in examples]),
        "labels": [example["labels"] for example in examples],
    }


def test_the_trainer_trains_the_switched_model(tmp_path):
    batch = fixed_batch()
    images, labels = batch["pixel_values"], batch["labels"]
    dataset = [{"pixel_values": image, "labels": targets} for image, targets in zip(images, labels)]
    model = use_ranking_loss(tiny_detr("rt_detr"), set_prediction_criterion("RankSortCriterion"))
    before = [p.detach().clone() for p in model.parameters()]
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=collate)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
