"""An EAGLE proposer's image-token mapping."""


class Proposer:
    def load_model(self, target_model):
        if supports_multimodal(target_model):
            if self.get_model_name(target_model) in ["A", "B"]:
                self.model.config.image_token_index = target_model.config.image_token_id
            elif self.get_model_name(target_model) == "PixtralForConditionalGeneration":
                self.model.config.image_token_index = (
                    target_model.config.vision_config.image_token_id
                )
            else:
                self.model.config.image_token_index = (
                    target_model.config.image_token_index
                )
        return self.model
