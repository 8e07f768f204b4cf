"""vram where training already runs: the Hugging Face Trainer
(vram.integrations.huggingface), Lightning (vram.integrations.lightning)
and Accelerate (vram.integrations.accelerate). Each module imports its
library; what they share is vram.integrations.common."""
