"""The doctor on a real timm model (skipped where timm is not installed, as in CI): its per-call counts are torch's
(a plain CompileCounter run) and its proof never calls a missed prediction met."""
import pytest
import torch
from torch._dynamo.testing import CompileCounter

from shapelab.tools.doctor import Call, diagnose

timm = pytest.importorskip("timm")


def test_convnext_with_varying_batches_and_images_is_counted_as_torch_counts():
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False).eval()
    calls = [Call(torch.randn(b, 3, s, s), grad=False) for b, s in ((2, 32), (1, 32), (4, 32), (3, 64))]
    torch._dynamo.reset()
    cnt, want = CompileCounter(), []
    compiled = torch.compile(model, backend=cnt)
    with torch.no_grad():
        for c in calls:
            compiled(*c.fresh().args)
            want.append(cnt.frame_count)
    torch._dynamo.reset()
    d = diagnose(model, calls, buckets=False, declarative=False)
    assert d.runs[0].counts == want, d.summary()
    for run in d.runs[1:]:
        assert (run.row()["prediction"] == "met") == (run.compiles == run.predicted and not run.stopped), run.row()
