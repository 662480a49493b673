"""Stands in for the openai package where it cannot be installed (Debian has none), so
that llama.cpp's server test modules import; a test that builds a client fails, saying
why (scripts/llama_server_tests.sh counts those apart)."""


class OpenAI:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the openai package is not installed here")
