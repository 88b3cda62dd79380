// The playground's examples: a constraint of each kind and a prompt that suits it.
const contact = {
  type: 'object',
  properties: {
    name: {type: 'string', minLength: 1, maxLength: 60},
    age: {type: 'integer', minimum: 0, maximum: 130},
    job_title: {type: 'string', maxLength: 60},
    company: {type: 'string', maxLength: 60},
    city: {type: 'string', maxLength: 60},
    email: {type: 'string', format: 'email'},
  },
  required: ['name', 'age', 'job_title', 'company', 'city', 'email'],
  additionalProperties: false,
};

const product = {
  type: 'object',
  properties: {
    product: {type: 'string', maxLength: 40},
    price: {type: 'number', minimum: 0},
    currency: {enum: ['EUR', 'USD', 'GBP']},
    in_stock: {type: 'boolean'},
    tags: {type: 'array', items: {type: 'string', maxLength: 20}, maxItems: 3},
  },
  required: ['product', 'price', 'currency', 'in_stock', 'tags'],
  additionalProperties: false,
};

const tools = [
  {type: 'function', function: {
    name: 'get_weather', description: 'The current weather in a city.',
    parameters: {type: 'object', properties: {
      city: {type: 'string', description: "The city's name, e.g. Paris"},
      unit: {type: 'string', enum: ['celsius', 'fahrenheit']}}, required: ['city']}}},
  {type: 'function', function: {
    name: 'get_time', description: 'The local time in a city.',
    parameters: {type: 'object', properties: {city: {type: 'string'}}, required: ['city']}}},
];

const json = (value) => JSON.stringify(value, null, 2);

export const EXAMPLES = {
  json_schema: [
    {name: 'Contact record', source: json(contact),
      prompt: 'Extract the contact details from this text as JSON.\n\nMaria Lopez is 34 years old. She is a software ' +
        'engineer. She works at Tidewater Labs and lives in Lisbon. Her email is maria.lopez@tidewater.io.'},
    {name: 'Product with an enum and a list', source: json(product),
      prompt: 'Describe this as JSON: a blue ceramic mug for 12.50 euros, in stock, good for coffee and tea.'},
    {name: 'A list of numbers', source: json({type: 'array', items: {type: 'integer', minimum: 1, maximum: 100},
      minItems: 3, maxItems: 5}), prompt: 'Give me a few prime numbers as a JSON array.'},
  ],
  grammar: [
    {name: 'Yes or no, with a reason', source: 'root   ::= answer ", because " reason "."\nanswer ::= "yes" | "no"\n' +
      'reason ::= [a-z ,]{1,80}', prompt: 'Is Paris the capital of France?'},
    {name: 'Arithmetic', source: 'root ::= expr " = " [0-9]{1,4}\nexpr ::= term ((" + " | " - ") term){0,3}\n' +
      'term ::= [0-9]{1,3} (" * " [0-9]{1,3})?', prompt: 'Write a sum of two small numbers and its result.'},
    {name: 'A date', source: 'root  ::= year "-" month "-" day\nyear  ::= "19" [0-9] [0-9] | "20" [0-9] [0-9]\n' +
      'month ::= "0" [1-9] | "1" [0-2]\nday   ::= "0" [1-9] | [12] [0-9] | "3" [01]',
    prompt: 'When did the Berlin Wall fall? Answer with the date.'},
  ],
  lark: [
    {name: 'A sentence', source: 'start: subject " " verb " " object "."\nsubject: "The cat" | "A dog" | "My friend"\n' +
      'verb: "likes" | "sees" | "follows"\nobject: /[a-z]+( [a-z]+)?/', prompt: 'Write one short sentence.'},
    {name: 'An answer with inline JSON', source: 'start: "Answer: " %json {"type": "object", "properties": ' +
      '{"city": {"type": "string"}, "country": {"type": "string"}}, "required": ["city", "country"]}',
    prompt: 'Which city is the capital of Italy? Give the city and its country.'},
  ],
  regex: [
    {name: 'A phone number', source: '\\(\\d{3}\\) \\d{3}-\\d{4}', prompt: 'Write a US phone number.'},
    {name: 'An ISO date', source: '\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])',
      prompt: 'When did the first person walk on the Moon?'},
    {name: 'A yes or no', source: '(Yes|No)\\. [A-Z][a-z ]{0,40}\\.', prompt: 'Is water wet?'},
  ],
  tools: [
    {name: 'Weather and time', source: json(tools), prompt: 'What is the weather like in Paris today?'},
  ],
};

export const SOURCE_LABELS = {
  json_schema: 'JSON Schema', grammar: 'GBNF grammar', lark: 'Lark grammar', regex: 'Regex (the whole output)',
  tools: 'Tools (OpenAI tool definitions)',
};
