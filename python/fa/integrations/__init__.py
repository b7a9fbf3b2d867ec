"""fa inside other frameworks. transformers_rules: how a call of transformers' attention interface maps onto fa
(plain Python over shapes, no torch); transformers: the attention backend built on those rules (needs torch and
transformers, imported only when asked for)."""
