"""A proposer whose Pixtral branch has no image_token_index fallback after it: it refuses."""


class Proposer:
    def load_model(self, target_model):
        if self.get_model_name(target_model) == "PixtralForConditionalGeneration":
            self.model.config.image_token_index = target_model.config.vision_config.image_token_id
        return self.model
