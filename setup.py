"""roberta_ext: RoBERTa-family encoders for torch.hub and fairseq (--user-dir plugin)."""

from setuptools import find_packages, setup

setup(
    name="roberta_ext",
    version="0.1.0",
    description="RoBERTa-family text encoders: a fairseq plugin and a torch.hub loader that needs no fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["roberta_ext", "roberta_ext.*"]),
    package_data={"roberta_ext": ["config/*/*.yaml"]},  # the hydra configs of fairseq-hydra-train
    install_requires=[
        "torch>=2.5",
        "numpy",
        "regex",
        "requests",
        "tqdm",
        "safetensors",
        "sentencepiece",
        # tokenizer.json (ModernBERT and the models on its architecture) is read by the reference library.
        "tokenizers",
    ],
    extras_require={
        # fairseq-fixed is fairseq 0.12 made to install on Python >= 3.11; see README.
        "fairseq": ["fairseq-fixed==0.12.3.1", "hydra-core==1.3.2", "omegaconf==2.3.0"],
        # roberta-ext export / hub.export_onnx: onnx and onnxscript write ONNX, onnxruntime checks the file.
        "export": ["onnx", "onnxscript", "onnxruntime"],
        # roberta-ext serve: the ASGI app, its server, its metrics, its answers' JSON, its request models.
        "serve": ["starlette", "uvicorn", "prometheus-client", "orjson", "pydantic"],
        # Past one machine: the server as a Ray Serve deployment, batch embedding as a Ray Data pipeline.
        "ray": ["ray[serve,data]>=2.60", "pyarrow"],
        "test": [
            "pytest",
            "hypothesis",
            "tokenizers",
            "transformers",
            "tiktoken",
            "onnx",
            "onnxscript",
            "onnxruntime",
            "httpx",
            "ray[serve,data]>=2.60",
        ],
    },
    entry_points={"console_scripts": ["roberta-ext=roberta_ext.cli:main"]},
)
