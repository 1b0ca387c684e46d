"""Neural style transfer in the PyTorch tutorial's idiom: a frozen convolutional feature network
(requires_grad_(False), eval()), a Normalization module with mean/std buffers from
torch.tensor(...).view(-1, 1, 1), ContentLoss and StyleLoss modules (Gram matrices through
view and mm, detached targets) inserted with add_module, the network cut after the last loss
with a slice, and the input image itself optimised by LBFGS with a closure that clamps
input_img.data in place."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h

SIZE = 16


class Features(nn.Module):  # the pretrained VGG's stand-in: conv/relu/pool with fixed weights
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True),
        )


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        self.loss = F.mse_loss(gram_matrix(input), self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


def get_style_model_and_losses(cnn, style_img, content_img, content_layers=("conv_4",),
                               style_layers=("conv_1", "conv_2", "conv_3", "conv_4")):
    normalization = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    content_losses, style_losses = [], []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = "conv_{}".format(i)
        elif isinstance(layer, nn.ReLU):
            name = "relu_{}".format(i)
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = "pool_{}".format(i)
        else:
            raise RuntimeError("Unrecognized layer: {}".format(layer.__class__.__name__))
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]
    return model, style_losses, content_losses


def total_loss(model, input_img, style_losses, content_losses, style_weight, content_weight):
    model(input_img)
    style_score = sum(sl.loss for sl in style_losses)
    content_score = sum(cl.loss for cl in content_losses)
    return style_score * style_weight + content_score * content_weight


torch.manual_seed(0)
cnn = h.same_start(torch, Features()).features.eval()
cnn.requires_grad_(False)
content_img = torch.from_numpy(h.data(1, 3, SIZE, SIZE, seed=31, kind="uniform"))
style_img = torch.from_numpy(h.data(1, 3, SIZE, SIZE, seed=32, kind="uniform"))
input_img = content_img.clone()
model, style_losses, content_losses = get_style_model_and_losses(cnn, style_img, content_img)
style_weight, content_weight = 1e5, 1.0
input_img.requires_grad_(True)
model.eval()
model.requires_grad_(False)
optimizer = torch.optim.LBFGS([input_img])

with torch.no_grad():
    first = total_loss(model, input_img, style_losses, content_losses, style_weight, content_weight).item()
losses = []
for step in range(4):
    def closure():
        with torch.no_grad():
            input_img.clamp_(0, 1)
        optimizer.zero_grad()
        loss = total_loss(model, input_img, style_losses, content_losses, style_weight, content_weight)
        loss.backward()
        return loss

    losses.append(optimizer.step(closure).item())
with torch.no_grad():
    input_img.data.clamp_(0, 1)  # the image the tutorial shows
h.report(first, losses)
