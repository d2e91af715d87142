"""What the inputs and options may be: the bounds and choices of every option, sentences and
documents as the encoders take them, and the words <-> pieces alignment with windows for long
inputs. Private, below every public layer.
"""
