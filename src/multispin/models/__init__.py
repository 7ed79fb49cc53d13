"""Language-model backends: the draft/target protocol, Hugging Face, tiny test models, registry."""
