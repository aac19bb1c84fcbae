"""diffusers on neuron (issue 24): a tiny UNet2DModel (down/up blocks with
attention, group norm, timestep embedding) trained two denoising steps
with DDPMScheduler noise, then sampled with a 3-step DDIM loop, against the
same on the CPU; no op falls back. Tolerances: float32 on both sides,
different summation order: losses 2e-4 relative, samples 1e-4.
"""

import torch
import torch.nn.functional as F

import torch_neuronx
import _ecosystem  # noqa: F401  (offline hub settings)


def run(device: str):
    from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(16, 32),
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    ).to(device)
    noise_sched = DDPMScheduler(num_train_timesteps=100)
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8, generator=g)
        noise = torch.randn(2, 3, 8, 8, generator=g)
        t = torch.randint(0, 100, (2,), generator=g)
        noisy = noise_sched.add_noise(x, noise, t)
        loss = F.mse_loss(unet(noisy.to(device), t.to(device)).sample, noise.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    sampler = DDIMScheduler(num_train_timesteps=100)
    sampler.set_timesteps(3)
    sample = torch.randn(1, 3, 8, 8, generator=g).to(device)
    with torch.no_grad():
        for t in sampler.timesteps:
            sample = sampler.step(unet(sample, t).sample, t, sample).prev_sample
    return losses, sample


def test_unet_training_and_ddim_sampling_match_cpu():
    (nl, ns), (cl, cs) = run("neuron"), run("cpu")
    assert ns.device.type == "neuron"
    torch.testing.assert_close(nl, cl, rtol=2e-4, atol=0)
    torch.testing.assert_close(ns.cpu(), cs, rtol=1e-4, atol=1e-4)
    assert torch_neuronx.get_fallback_ops() == []
