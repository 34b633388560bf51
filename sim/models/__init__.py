"""Models read from a Hugging Face ``config.json`` on disk (``hf_config``) and the
config files shipped as presets (``configs/``)."""
