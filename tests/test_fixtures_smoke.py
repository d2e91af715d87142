from contextembed import load_encoder


def test_tiny_models_load(tiny_bert_dir, tiny_roberta_dir):
    bert = load_encoder(str(tiny_bert_dir), device="cpu")
    roberta = load_encoder(str(tiny_roberta_dir), device="cpu")
    assert (bert.n_layers, bert.width, bert.max_length) == (3, 32, 40)
    assert (roberta.n_layers, roberta.width, roberta.max_length) == (3, 32, 40)
    out = roberta.encode([["New", "York", "naïve", "\u200b", ""]])
    assert out[0].shape == (3, 5, 32)
