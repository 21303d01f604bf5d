"""A proposer that already maps the model's image token (native from a later release)."""


class Proposer:
    def load_model(self, target_model):
        if self.get_model_name(target_model) == "PixtralForConditionalGeneration":
            self.model.config.image_token_index = target_model.config.vision_config.image_token_id
        elif self.get_model_name(target_model) == "KimiK25ForConditionalGeneration":
            self.model.config.image_token_index = target_model.config.media_placeholder_token_id
        else:
            self.model.config.image_token_index = target_model.config.image_token_index
