"""Sharing on the Hugging Face Hub: the exact folder that is uploaded, its model card, the upload."""
