"""benchmarks/gpu_report.py runs end to end on a CPU with --quick (so that it does not rot before
someone has a GPU), loading a reference implementation from a repository path as it loads the
official code: here a stand-in repository with the official functions' interface."""

import textwrap

import torch

from benchmarks import gpu_report

STAND_IN = {
    # The official aLRPLoss / APLoss interface: allocation with .cuda(), (loss, rank, order) for aLRP.
    "alrp_loss.py": """
        import torch

        class aLRPLoss(torch.autograd.Function):
            @staticmethod
            def forward(ctx, logits, targets, regression_losses, delta=1.0, eps=1e-5):
                positives = int((targets == 1).sum())
                ctx.save_for_backward(torch.zeros(logits.shape).cuda())
                rank = torch.arange(1, positives + 1, dtype=torch.float32).cuda()
                return logits.sum() * 0 + 0.5, rank, torch.arange(positives).cuda()

            @staticmethod
            def backward(ctx, grad, *unused):
                return ctx.saved_tensors[0] * grad, None, None, None, None
    """,
    "ap_loss.py": """
        import torch

        class APLoss(torch.autograd.Function):
            @staticmethod
            def forward(ctx, logits, targets, delta=1.0):
                ctx.save_for_backward(torch.zeros(logits.shape).cuda())
                return logits.sum() * 0 + 0.5

            @staticmethod
            def backward(ctx, grad):
                return ctx.saved_tensors[0] * grad, None, None
    """,
}


def test_quick_cpu_report(tmp_path, monkeypatch):
    # The reference losses' loader redirects Tensor.cuda for the process; restored after this test.
    monkeypatch.setattr(torch.Tensor, "cuda", torch.Tensor.cuda)
    losses = tmp_path / "official" / "mmdet" / "models" / "losses"
    losses.mkdir(parents=True)
    for name, source in STAND_IN.items():
        (losses / name).write_text(textwrap.dedent(source))
    output = tmp_path / "report.md"
    gpu_report.main(
        [
            "--device",
            "cpu",
            "--quick",
            "--repeats",
            "1",
            "--official-repo",
            str(tmp_path / "official"),
            "--output",
            str(output),
        ]
    )
    text = output.read_text()
    for section in ("Exactness", "Loss speed", "Training iteration", "Host synchronisations", "Peak memory"):
        assert f"## {section}" in text
    assert "| aLRP Loss | official |" in text and "| interpolated AP Loss | official |" in text
    assert "| ap | BRL | not run (no repository given) |" in text
    assert "| rank_sort | official | not run (no repository given) |" in text
    assert "| Rank & Sort Loss | ours |" in text
    assert "| faster_rcnn | 2 | 4 |" in text  # two ranking heads, two synchronisations each
