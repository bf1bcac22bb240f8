"""SCNN architecture: shapes per recipe, VGG16-BN layout, fast message passing == the naive reference."""

import pytest
import torch

from dtrain.errors import DataError, SpecError
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import (
    SCNN,
    MessagePassing,
    SCNNConfig,
    load_backbone_weights,
    probabilities,
)

VGG16_BN_FEATURES_PARAMS = 14_723_136  # torchvision vgg16_bn().features: 13 convs + 13 BNs


@pytest.mark.parametrize("name", ["tiny", "demo"])
def test_recipe_models_give_full_resolution_maps_and_lane_existence(name):
    cfg = recipes.get(name).model
    w, h = cfg.input_size
    model = SCNN(cfg)
    seg, exist = model(torch.randn(2, 3, h, w))
    assert seg.shape == (2, cfg.num_lanes + 1, h, w)
    assert exist.shape == (2, cfg.num_lanes)
    prob, p_exist = probabilities(model.eval(), torch.randn(1, 3, h, w))
    torch.testing.assert_close(prob.sum(dim=1), torch.ones(1, h, w))
    assert ((p_exist > 0) & (p_exist < 1)).all()


def test_paper_model_has_published_layout():
    cfg = recipes.paper().model
    w, h = cfg.input_size
    with torch.device("meta"):  # full width: check shapes without spending CPU on the convolutions
        model = SCNN(cfg)
        seg, exist = model(torch.empty(1, 3, h, w))
    assert seg.shape == (1, 6, h, w) and exist.shape == (1, 5)
    assert sum(p.numel() for p in model.backbone.parameters()) == VGG16_BN_FEATURES_PARAMS
    convs = [m for m in model.backbone if isinstance(m, torch.nn.Conv2d)]
    assert [c.dilation[0] for c in convs] == [1] * 10 + [2] * 3  # conv5 dilated, pool4/pool5 gone
    assert sum(isinstance(m, torch.nn.MaxPool2d) for m in model.backbone) == 3  # output stride 8
    assert model.neck[0].dilation == (4, 4) and model.neck[0].out_channels == 1024 and model.neck[3].out_channels == 128
    assert model.message_passing.down.weight.shape == (128, 128, 1, 9)
    assert model.message_passing.right.weight.shape == (128, 128, 9, 1)


def test_backbone_weights_load_from_a_torchvision_style_file(tmp_path):
    cfg = SCNNConfig(width=0.125, input_size=(64, 32))
    torch.manual_seed(1)
    source = SCNN(cfg)
    path = tmp_path / "vgg.pt"
    torch.save({f"features.{k}": v for k, v in source.backbone.state_dict().items()}, path)
    torch.manual_seed(2)
    model = SCNN(cfg)
    load_backbone_weights(model, path)
    for k, v in source.backbone.state_dict().items():
        assert torch.equal(model.backbone.state_dict()[k], v), k
    with pytest.raises(DataError, match="width 0.25"):
        load_backbone_weights(SCNN(SCNNConfig(width=0.25, input_size=(64, 32))), path)
    with pytest.raises(DataError, match="no such file"):
        load_backbone_weights(model, tmp_path / "missing.pt")


def test_backbone_weights_that_are_no_state_dict_give_one_line(tmp_path):
    model = SCNN(SCNNConfig(width=0.125, input_size=(64, 32)))
    fix = r"; give VGG16-BN features saved with torch.save\(vgg16_bn\(\).features.state_dict\(\), path\)$"
    labels = tmp_path / "test_label.json"
    labels.write_text('{"lanes": [], "h_samples": [160], "raw_file": "clips/a/1/20.jpg"}\n')
    with pytest.raises(DataError, match=f"^backbone weights {labels}: not a file torch.save wrote{fix}"):
        load_backbone_weights(model, labels)
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    with pytest.raises(DataError, match=rf"^backbone weights {tmp_path / 'tensor.pt'}: not a state_dict \(names to tensors\){fix}"):
        load_backbone_weights(model, tmp_path / "tensor.pt")
    with pytest.raises(DataError, match=f"^backbone weights {tmp_path}: a folder, not a file{fix}"):
        load_backbone_weights(model, tmp_path)
    with pytest.raises(DataError, match=f"^backbone weights /dev/null: not a regular file{fix}"):
        load_backbone_weights(model, "/dev/null")


def _mp_pair(channels: int, kernel: int, dtype: torch.dtype) -> tuple[MessagePassing, MessagePassing]:
    torch.manual_seed(0)
    fast = MessagePassing(channels, kernel, "fast").to(dtype)
    for p in fast.parameters():
        torch.nn.init.normal_(p, std=0.5 / (channels * kernel) ** 0.5)  # keeps the sweeps from blowing up
    naive = MessagePassing(channels, kernel, "naive").to(dtype)
    naive.load_state_dict(fast.state_dict())
    return fast, naive


@pytest.mark.parametrize("shape", [(2, 6, 7, 11), (1, 4, 1, 5), (3, 5, 9, 2)])
def test_fast_message_passing_matches_naive_outputs_and_gradients(shape):
    fast, naive = _mp_pair(shape[1], 5, torch.float64)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    y_fast, y_naive = fast(x), naive(x)
    assert not torch.equal(y_fast, x)  # the sweeps change the map
    torch.testing.assert_close(y_fast, y_naive, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(y_fast)
    grads_fast = torch.autograd.grad(y_fast, [x, *fast.parameters()], g)
    grads_naive = torch.autograd.grad(y_naive, [x, *naive.parameters()], g, allow_unused=True)
    for a, b in zip(grads_fast, grads_naive):
        # a 1-row map never uses the vertical sweeps' weights: the naive graph has no gradient for them
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b, rtol=1e-9, atol=1e-9)


def test_fast_message_passing_passes_gradcheck():
    fast, _ = _mp_pair(3, 3, torch.float64)
    x = torch.randn(1, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fast, (x,))


def test_fast_model_equals_naive_model_in_float32():
    cfg = SCNNConfig(width=0.125, input_size=(128, 64), dropout=0.0)
    torch.manual_seed(0)
    fast = SCNN(cfg)
    naive = SCNN(SCNNConfig(width=0.125, input_size=(128, 64), dropout=0.0, message_passing="naive"))
    naive.load_state_dict(fast.state_dict())
    img = torch.randn(2, 3, 64, 128)
    (seg_f, ex_f), (seg_n, ex_n) = fast(img), naive(img)
    torch.testing.assert_close(seg_f, seg_n, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ex_f, ex_n, rtol=1e-4, atol=1e-4)
    (seg_f.square().mean() + ex_f.mean()).backward()
    (seg_n.square().mean() + ex_n.mean()).backward()
    for (name, a), b in zip(fast.named_parameters(), naive.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("kwargs", [dict(input_size=(500, 288)), dict(width=0.0), dict(message_passing="magic"),
                                    dict(mp_kernel=8)])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(SpecError):
        SCNNConfig(**kwargs)
