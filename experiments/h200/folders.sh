# The folders and step count every H200 round script here reads (sourced): the GGUF, the fp32 HF
# folder made from it, and a new results folder.
GGUF_DIR=${GGUF_DIR:?set GGUF_DIR to the folder holding the GGUF}
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
HF=${HF:?set HF to the folder for the fp32 HF model (converted from the GGUF if absent)}
R=${RESULTS:?set RESULTS to a new folder for the results}
STEPS=${STEPS:-150}
